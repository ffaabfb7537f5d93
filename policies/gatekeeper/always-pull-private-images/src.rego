# Containers running images from private registries must use
# imagePullPolicy: Always, where kubelets do not verify pull credentials for
# cached images.
#
# Without the kubelet feature KubeletEnsureSecretPulledImages (alpha in
# Kubernetes 1.33, off by default), a kubelet hands an image it already pulled
# with one Pod's credentials to any later Pod on the node that names it with
# IfNotPresent or Never -- even a Pod that has no credentials for the
# registry. Always makes the kubelet ask the registry each time, so every Pod
# proves its own access. Once every kubelet in the cluster enables the
# feature, remove this constraint.
#
# parameters.privateRegistries: image reference prefixes that need
# credentials, as written in Pod specs, e.g. "registry.example.com/" or
# "ghcr.io/my-org/" (keep the trailing "/": without it the prefix also
# matches other hosts, which only errs on the safe side). Docker Hub private
# repositories are written both ways: "docker.io/my-org/" and "my-org/".
package k8salwayspullprivateimages

import rego.v1

violation contains {"msg": msg, "details": {"container": container.name, "image": container.image, "imagePullPolicy": policy}} if {
	some container in containers
	private(container.image)
	policy := pull_policy(container)
	policy != "Always"
	msg := sprintf(
		"container %v uses private image %v with imagePullPolicy %v; use Always so the registry checks this Pod's own pull credentials (kubelets without KubeletEnsureSecretPulledImages reuse cached private images for any Pod)",
		[container.name, container.image, policy],
	)
}

containers contains container if {
	some field in ["containers", "initContainers", "ephemeralContainers"]
	some container in object.get(input.review.object.spec, field, [])
}

private(image) if {
	some prefix in object.get(input.parameters, "privateRegistries", [])
	startswith(image, prefix)
}

# The API server defaults imagePullPolicy before admission; audit and offline
# checks may see objects without it, so apply the same default: Always for
# the tag "latest" or no tag at all (no digest either), IfNotPresent otherwise.
pull_policy(container) := container.imagePullPolicy

pull_policy(container) := "Always" if {
	not container.imagePullPolicy
	image_tag(container.image) == "latest"
}

pull_policy(container) := "IfNotPresent" if {
	not container.imagePullPolicy
	image_tag(container.image) != "latest"
}

# The tag of an image reference ("" with a digest and no tag; "latest" with neither).
image_tag(image) := tag if {
	name := split(image, "@")[0]
	last := regex.split("/", name)[count(regex.split("/", name)) - 1]
	parts := split(last, ":")
	tag := tag_of(parts, contains(image, "@"))
}

tag_of(parts, _) := parts[1] if count(parts) == 2

tag_of(parts, true) := "" if count(parts) == 1

tag_of(parts, false) := "latest" if count(parts) == 1
