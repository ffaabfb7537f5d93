package k8salwayspullprivateimages

import rego.v1

parameters := {"privateRegistries": ["registry.example.com/", "ghcr.io/acme/"]}

pod(containers) := {"review": {"object": {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {"containers": containers}}}, "parameters": parameters}

test_private_image_with_always_is_allowed if {
	count(violation) == 0 with input as pod([{"name": "app", "image": "registry.example.com/app:1.2", "imagePullPolicy": "Always"}])
}

test_public_image_with_if_not_present_is_allowed if {
	count(violation) == 0 with input as pod([{"name": "app", "image": "nginx:1.27", "imagePullPolicy": "IfNotPresent"}])
}

test_private_image_with_if_not_present_is_denied if {
	vs := violation with input as pod([{"name": "app", "image": "registry.example.com/app:1.2", "imagePullPolicy": "IfNotPresent"}])
	count(vs) == 1
	some v in vs
	v.details.imagePullPolicy == "IfNotPresent"
	contains(v.msg, "registry.example.com/app:1.2")
}

test_private_image_with_never_is_denied if {
	count(violation) == 1 with input as pod([{"name": "app", "image": "ghcr.io/acme/tool@sha256:0123", "imagePullPolicy": "Never"}])
}

test_other_org_on_same_registry_is_public if {
	count(violation) == 0 with input as pod([{"name": "app", "image": "ghcr.io/someone/tool:1", "imagePullPolicy": "IfNotPresent"}])
}

test_init_and_ephemeral_containers_are_checked if {
	input_pod := {"review": {"object": {"kind": "Pod", "spec": {
		"containers": [{"name": "app", "image": "nginx:1", "imagePullPolicy": "IfNotPresent"}],
		"initContainers": [{"name": "init", "image": "registry.example.com/init:1", "imagePullPolicy": "IfNotPresent"}],
		"ephemeralContainers": [{"name": "debug", "image": "registry.example.com/debug:1", "imagePullPolicy": "Never"}],
	}}}, "parameters": parameters}
	vs := violation with input as input_pod
	{v.details.container | some v in vs} == {"init", "debug"}
}

test_missing_policy_defaults_like_the_api_server if {
	# no tag: Always by default, allowed
	count(violation) == 0 with input as pod([{"name": "a", "image": "registry.example.com/app"}])
	count(violation) == 0 with input as pod([{"name": "a", "image": "registry.example.com/app:latest"}])
	# a tag other than latest, or a digest alone: IfNotPresent, denied
	count(violation) == 1 with input as pod([{"name": "a", "image": "registry.example.com/app:1.0"}])
	count(violation) == 1 with input as pod([{"name": "a", "image": "registry.example.com/app@sha256:abcd"}])
}

test_no_parameters_means_no_private_registries if {
	count(violation) == 0 with input as {"review": {"object": {"spec": {"containers": [{"name": "a", "image": "registry.example.com/app:1", "imagePullPolicy": "Never"}]}}}}
}
