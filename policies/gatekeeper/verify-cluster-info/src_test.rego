# Unit tests for src.rego with `external_data` replaced by fixed answers in
# Gatekeeper's shape: {responses, errors, status_code, system_error}.
# Run by tests/integration/test_neighbours_policies.py under the OPA engine.
package k8sverifyclusterinfo

import future.keywords.contains
import future.keywords.if
import future.keywords.in

admission := {
	"review": {
		"uid": "0d6a1f0e-6393-11e8-b7cc-42010a800002",
		"kind": {"group": "", "version": "v1", "kind": "ConfigMap"},
		"name": "cluster-info",
		"namespace": "kube-public",
		"operation": "UPDATE",
		"userInfo": {"username": "system:serviceaccount:kube-system:bootstrap-signer", "groups": ["system:serviceaccounts", "system:authenticated"]},
		"object": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cluster-info", "namespace": "kube-public"}, "data": {"kubeconfig": "apiVersion: v1\nkind: Config\n", "jws-kubeconfig-07401b": "eyJhbGciOiJIUzI1NiIsImtpZCI6IjA3NDAxYiJ9..tYEfbo6zDNo40MQE07aZcQX2m3EB2rO3NuXtxVMYm9U"}},
		"oldObject": null,
		"dryRun": false,
	},
	"parameters": {"tokenIds": ["07401b"]},
}

denied_reason := "signature-invalid"

verdict(allowed, reason) := {"allowed": allowed, "verified": allowed, "reason": reason, "message": sprintf("verdict %v", [reason]), "signers": [], "diff": []}

answered(request, value) := {"responses": [[request.keys[0], value]], "errors": [], "status_code": 200, "system_error": ""}

allow(request) := answered(request, verdict(true, "verified"))

deny(request) := answered(request, verdict(false, denied_reason))

cache_hit(request) := {"responses": [[request.keys[0], verdict(true, "verified")]], "errors": [], "status_code": 0, "system_error": ""}

unreachable(_) := {"responses": null, "errors": null, "status_code": 500, "system_error": "dial tcp 10.0.0.1:8443: connect: connection refused"}

null_responses(_) := {"responses": null, "errors": null, "status_code": 200, "system_error": ""}

transient(request) := {"responses": [], "errors": [], "status_code": 200, "system_error": "transient-error: reading Secret kube-system/bootstrap-token-abcdef failed"}

key_error(request) := {"responses": [], "errors": [[request.keys[0], "policy-invalid: unknown field(s)"]], "status_code": 200, "system_error": ""}

missing_key(_) := {"responses": [["some other key", verdict(true, "verified")]], "errors": [], "status_code": 200, "system_error": ""}

allowed_as_string(request) := answered(request, {"allowed": "true", "reason": "verified", "message": "ok"})

malformed_value(request) := answered(request, "allowed")

# Allows only when the key names this check and carries the review fields and the parameters.
allow_expected_key(request) := allow(request) if {
	json.unmarshal(request.keys[0]) == {
		"check": check,
		"review": object.remove(admission.review, ["uid"]),
		"policy": admission.parameters,
	}
	request.provider == "manifest-provider"
	count(request.keys) == 1
} else := deny(request)

test_allowed_object_has_no_violation if {
	count(violation) == 0 with input as admission with external_data as allow
}

test_cache_hit_with_status_code_zero_is_an_answer if {
	count(violation) == 0 with input as admission with external_data as cache_hit
}

test_key_names_the_check_and_carries_review_and_parameters if {
	count(violation) == 0 with input as admission with external_data as allow_expected_key
}

test_missing_parameters_are_sent_as_an_empty_policy if {
	key := provider_key with input as {"review": admission.review}
	json.unmarshal(key).policy == {}
	json.unmarshal(key).check == check
}

test_denied_object_carries_the_provider_reason if {
	vs := violation with input as admission with external_data as deny
	count(vs) == 1
	some v in vs
	v.msg == sprintf("verdict %v (reason: %v)", [denied_reason, denied_reason])
	v.details.reason == denied_reason
}

test_unreachable_provider_is_a_violation if {
	vs := violation with input as admission with external_data as unreachable
	count(vs) == 1
	some v in vs
	contains(v.msg, "connection refused")
	v.details.reason == "provider-error"
}

test_transient_system_error_is_a_violation if {
	vs := violation with input as admission with external_data as transient
	count(vs) == 1
	some v in vs
	contains(v.msg, "could not check this object")
}

test_null_responses_are_a_violation if {
	count(violation) == 1 with input as admission with external_data as null_responses
}

test_per_key_error_is_a_violation if {
	vs := violation with input as admission with external_data as key_error
	count(vs) == 1
	some v in vs
	v.details.reason == "request-invalid"
	contains(v.msg, "policy-invalid")
}

test_missing_answer_is_a_violation if {
	count(violation) == 1 with input as admission with external_data as missing_key
}

test_allowed_must_be_the_boolean_true if {
	count(violation) == 1 with input as admission with external_data as allowed_as_string
}

test_malformed_answer_is_a_violation if {
	count(violation) == 1 with input as admission with external_data as malformed_value
}
