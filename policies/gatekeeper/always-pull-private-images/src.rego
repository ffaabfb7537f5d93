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
# "ghcr.io/my-org/". A prefix is compared as a plain string: keep the
# trailing "/", without it "registry.example.com" also matches
# "registry.example.com:5000/..." and "registry.example.com.evil.io/..."
# (which only errs on the safe side); a registry on another port is
# another prefix ("registry.example.com:5000/"). References are not
# normalised: Docker Hub private repositories are written three ways,
# "docker.io/my-org/", "index.docker.io/my-org/" and "my-org/".
#
# The Kyverno policy always-pull-private-images implements the same rule
# (tests/policies/test_kyverno.py holds both to it, case by case).
# Pods only: workloads reach this template through Gatekeeper's expansion
# of their pod templates.
package k8salwayspullprivateimages

import future.keywords.contains
import future.keywords.if
import future.keywords.in

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

# Containers, init containers and ephemeral containers that name an image.
containers contains container if {
	some field in ["containers", "initContainers", "ephemeralContainers"]
	some container in object.get(input.review.object.spec, field, [])
	is_set(object.get(container, "image", null))
}

private(image) if {
	some prefix in object.get(input.parameters, "privateRegistries", [])
	startswith(image, prefix)
}

# An imagePullPolicy that is set is taken as written. The API server defaults
# a missing (or empty) one before admission; audit of stored objects sees the
# default, offline checks (gator) and raw manifests may not, so apply the same
# default here.
pull_policy(container) := container.imagePullPolicy if is_set(object.get(container, "imagePullPolicy", null))

pull_policy(container) := default_pull_policy(container.image) if not is_set(object.get(container, "imagePullPolicy", null))

# Set, as JMESPath's truthiness has it (the Kyverno policy's test).
is_set(value) if not value in {null, false, "", [], {}}

# The API server's default: Always for the tag "latest", or for neither tag nor
# digest; IfNotPresent otherwise (another tag, or a digest without a tag).
default_pull_policy(image) := "Always" if always_by_default(image)

default_pull_policy(image) := "IfNotPresent" if not always_by_default(image)

always_by_default(image) if latest(image)

always_by_default(image) if {
	not contains(image, "@")
	not tagged(image)
}

latest(image) if endswith(image, ":latest")

latest(image) if contains(image, ":latest@")

# A tag is a ":" after the first "/" (one before it is a registry port,
# "registry.example.com:5000/app"), or any ":" in a reference without "/"
# ("app:1.0"): indexof gives -1 when there is no "/", so the whole reference
# is searched. Exact for valid references; malformed ones (which no kubelet
# can pull) get the same string rule as in the Kyverno policy.
tagged(image) if contains(substring(image, indexof(image, "/") + 1, -1), ":")
