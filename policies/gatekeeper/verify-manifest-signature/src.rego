# Verify that the object under review is exactly what its author signed
# (k8s-manifest-sigstore annotations), by asking manifest-provider through
# Gatekeeper's external data.
#
# One key per object: a JSON string {"review": {...}, "policy": <parameters>}
# (docs/api.md). The provider answers {allowed, verified, reason, message,
# signers, diff} for it.
#
# Fail closed: anything but an answer with `allowed: true` for our key is a
# violation -- the provider unreachable or refusing the request
# (`system_error`, `responses: null`), a per-key error, a missing or
# malformed answer. `status_code` is 0 when every key came from Gatekeeper's
# response cache: that is an answer, not an error.
package k8sverifymanifestsignature

import future.keywords.contains
import future.keywords.if
import future.keywords.in

# The name of the Provider resource (provider.yaml beside this file).
provider_name := "manifest-provider"

# What the provider reads from input.review: the object and who writes it, and
# which resource and subresource the write goes to -- a request on a
# subresource (scale, binding, status, ...) says so only in these fields, and
# may carry another kind's object (docs/policy.md, "Subresources"). The
# request uid is left out on purpose: Gatekeeper caches answers by key, and a
# uid would make every key unique.
review_fields := [
	"object", "oldObject", "operation", "userInfo", "namespace", "name", "kind", "dryRun",
	"resource", "subResource", "requestKind", "requestResource", "requestSubResource",
]

review := {field: value |
	some field in review_fields
	value := input.review[field]
}

provider_key := json.marshal({"review": review, "policy": object.get(input, "parameters", {})})

violation contains {"msg": msg, "details": details} if {
	response := external_data({"provider": provider_name, "keys": [provider_key]})
	[msg, details] := problem(response, provider_key)
}

# The answers Gatekeeper reports for `key`: [[key, value], ...] pairs.
answers(response, key) := [value |
	some pair in response.responses
	is_array(pair)
	count(pair) == 2
	pair[0] == key
	value := pair[1]
]

key_errors(response, key) := [error |
	errors := object.get(response, "errors", [])
	is_array(errors)
	some pair in errors
	is_array(pair)
	count(pair) == 2
	pair[0] == key
	error := pair[1]
]

# problem(response, key) is [message, details] when the object must not be
# admitted, and undefined when the provider allowed it. The clauses are
# tried in order: the first that holds names the problem.
problem(response, key) := [msg, {"reason": "provider-error"}] if {
	not is_object(response)
	msg := "manifest-provider: external data returned no response object"
} else := [msg, {"reason": "provider-error"}] if {
	error := object.get(response, "system_error", "")
	error != ""
	msg := sprintf("manifest-provider could not verify this object: %v", [error])
} else := [msg, {"reason": "provider-error"}] if {
	code := object.get(response, "status_code", 0)
	not code in {0, 200}
	msg := sprintf("manifest-provider answered with HTTP status %v", [code])
} else := [msg, {"reason": "provider-error"}] if {
	not is_array(object.get(response, "responses", null))
	msg := "manifest-provider gave no answer (responses: null)"
} else := [msg, {"reason": "request-invalid"}] if {
	errors := key_errors(response, key)
	count(errors) > 0
	msg := sprintf("manifest-provider refused to verify this object: %v", [concat("; ", [sprintf("%v", [e]) | some e in errors])])
} else := [msg, {"reason": "provider-error"}] if {
	n := count(answers(response, key))
	n != 1
	msg := sprintf("manifest-provider returned %v answers for this object; expected exactly one", [n])
} else := [msg, {"reason": "provider-error"}] if {
	[value] := answers(response, key)
	not is_object(value)
	msg := "manifest-provider returned a malformed answer for this object"
} else := [msg, details] if {
	[value] := answers(response, key)
	not value.allowed == true
	reason := object.get(value, "reason", "no-reason")
	msg := sprintf("%v (reason: %v)", [object.get(value, "message", "manifest-provider did not allow this object"), reason])
	details := {
		"reason": reason,
		"verified": object.get(value, "verified", false),
		"signers": object.get(value, "signers", []),
		"diff": object.get(value, "diff", []),
	}
}
