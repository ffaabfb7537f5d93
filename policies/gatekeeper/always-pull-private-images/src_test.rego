package k8salwayspullprivateimages

import future.keywords.contains
import future.keywords.if
import future.keywords.in

parameters := {"privateRegistries": ["registry.example.com/", "ghcr.io/acme/"]}

pod(containers) := pod_with(containers, parameters.privateRegistries)

pod_with(containers, registries) := {"review": {"object": {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {"containers": containers}}}, "parameters": {"privateRegistries": registries}}

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

test_denied_default_is_reported_as_if_not_present if {
	vs := violation with input as pod([{"name": "a", "image": "registry.example.com/app:1.0"}])
	{v.details.imagePullPolicy | some v in vs} == {"IfNotPresent"}
}

test_empty_policy_counts_as_missing if {
	count(violation) == 0 with input as pod([{"name": "a", "image": "registry.example.com/app", "imagePullPolicy": ""}])
	count(violation) == 1 with input as pod([{"name": "a", "image": "registry.example.com/app:1.0", "imagePullPolicy": ""}])
	count(violation) == 1 with input as pod([{"name": "a", "image": "registry.example.com/app:1.0", "imagePullPolicy": null}])
}

test_tag_and_digest if {
	# the tag decides, as in the API server: latest is Always, anything else IfNotPresent
	count(violation) == 1 with input as pod([{"name": "a", "image": "registry.example.com/app:1.0@sha256:abcd"}])
	count(violation) == 0 with input as pod([{"name": "a", "image": "registry.example.com/app:latest@sha256:abcd"}])
}

test_registry_port_is_not_a_tag if {
	ports := ["registry.example.com:5000/"]
	count(violation) == 0 with input as pod_with([{"name": "a", "image": "registry.example.com:5000/app"}], ports)
	count(violation) == 0 with input as pod_with([{"name": "a", "image": "registry.example.com:5000/team/app"}], ports)
	count(violation) == 1 with input as pod_with([{"name": "a", "image": "registry.example.com:5000/app:1.0"}], ports)
	count(violation) == 1 with input as pod_with([{"name": "a", "image": "registry.example.com:5000/app@sha256:abcd"}], ports)
	count(violation) == 0 with input as pod_with([{"name": "a", "image": "registry.example.com:5000/app:latest"}], ports)
}

test_a_colon_without_a_slash_is_a_tag if {
	names := ["localhost"]
	count(violation) == 1 with input as pod_with([{"name": "a", "image": "localhost:5000"}], names)
	count(violation) == 0 with input as pod_with([{"name": "a", "image": "localhost"}], names)
}

test_prefixes_are_plain_strings if {
	# with the trailing "/": that host only, not its other ports or longer names
	count(violation) == 0 with input as pod([{"name": "a", "image": "registry.example.com:5000/app:1", "imagePullPolicy": "Never"}])
	count(violation) == 0 with input as pod([{"name": "a", "image": "registry.example.com.evil.io/app:1", "imagePullPolicy": "Never"}])
	# without it: both
	bare := ["registry.example.com"]
	count(violation) == 1 with input as pod_with([{"name": "a", "image": "registry.example.com:5000/app:1", "imagePullPolicy": "Never"}], bare)
	count(violation) == 1 with input as pod_with([{"name": "a", "image": "registry.example.com.evil.io/app:1", "imagePullPolicy": "Never"}], bare)
}

test_docker_hub_is_matched_as_written if {
	hub := ["docker.io/acme/"]
	count(violation) == 1 with input as pod_with([{"name": "a", "image": "docker.io/acme/app:1"}], hub)
	# the implicit docker.io is another spelling, with its own prefix
	count(violation) == 0 with input as pod_with([{"name": "a", "image": "acme/app:1"}], hub)
	both := ["docker.io/acme/", "acme/"]
	count(violation) == 1 with input as pod_with([{"name": "a", "image": "acme/app:1"}], both)
	count(violation) == 0 with input as pod_with([{"name": "a", "image": "acme/app"}], both)
}

test_malformed_reference_is_not_a_pass if {
	# two tags: no valid reference, the API server defaults it to IfNotPresent
	count(violation) == 1 with input as pod([{"name": "a", "image": "registry.example.com/app:1:2"}])
}

test_containers_without_an_image_are_skipped if {
	count(violation) == 0 with input as pod([{"name": "a", "imagePullPolicy": "Never"}, {"name": "b", "image": "", "imagePullPolicy": "Never"}])
}

test_no_parameters_means_no_private_registries if {
	count(violation) == 0 with input as {"review": {"object": {"spec": {"containers": [{"name": "a", "image": "registry.example.com/app:1", "imagePullPolicy": "Never"}]}}}}
}
