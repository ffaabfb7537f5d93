# Unit tests for src.rego with `external_data` replaced by fixed answers in
# Gatekeeper's shape: {responses, errors, status_code, system_error}.
# Run by tests/policies/test_gatekeeper.py under the OPA engine.
package k8sverifymanifestsignature

import future.keywords.contains
import future.keywords.if
import future.keywords.in

admission := {
	"review": {
		"uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
		"kind": {"group": "", "version": "v1", "kind": "ConfigMap"},
		"name": "app-config",
		"namespace": "demo",
		"operation": "CREATE",
		"userInfo": {"username": "alice", "groups": ["system:authenticated"]},
		"object": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "app-config", "namespace": "demo"}, "data": {"mode": "on"}},
		"oldObject": null,
		"dryRun": false,
	},
	"parameters": {"keys": ["-----BEGIN PUBLIC KEY-----\nMFkw\n-----END PUBLIC KEY-----\n"]},
}

verdict(allowed, reason) := {"allowed": allowed, "verified": allowed, "reason": reason, "message": sprintf("verdict %v", [reason]), "signers": [], "diff": []}

answered(request, value) := {"responses": [[request.keys[0], value]], "errors": [], "status_code": 200, "system_error": ""}

allow(request) := answered(request, verdict(true, "verified"))

deny(request) := answered(request, verdict(false, "content-mismatch"))

cache_hit(request) := {"responses": [[request.keys[0], verdict(true, "verified")]], "errors": [], "status_code": 0, "system_error": ""}

cache_hit_denied(request) := {"responses": [[request.keys[0], verdict(false, "unsigned")]], "errors": [], "status_code": 0, "system_error": ""}

unreachable(_) := {"responses": null, "errors": null, "status_code": 500, "system_error": "dial tcp 10.0.0.1:8443: connect: connection refused"}

null_responses(_) := {"responses": null, "errors": null, "status_code": 200, "system_error": ""}

system_error_with_answer(request) := {"responses": [[request.keys[0], verdict(true, "verified")]], "errors": [], "status_code": 200, "system_error": "deadline exceeded"}

http_error_without_message(request) := {"responses": [[request.keys[0], verdict(true, "verified")]], "errors": [], "status_code": 503, "system_error": ""}

key_error(request) := {"responses": [], "errors": [[request.keys[0], "policy: no keys or signers"]], "status_code": 200, "system_error": ""}

missing_key(_) := {"responses": [["some other key", verdict(true, "verified")]], "errors": [], "status_code": 200, "system_error": ""}

empty_answer(_) := {"responses": [], "errors": [], "status_code": 200, "system_error": ""}

duplicate_answers(request) := {"responses": [[request.keys[0], verdict(true, "verified")], [request.keys[0], verdict(true, "verified")]], "errors": [], "status_code": 200, "system_error": ""}

malformed_value(request) := answered(request, "allowed")

allowed_as_string(request) := answered(request, {"allowed": "true", "reason": "verified", "message": "ok"})

allowed_missing(request) := answered(request, {"reason": "verified", "message": "ok"})

not_an_object(_) := "ok"

# Allows only when the key is exactly the review fields plus the parameters.
allow_expected_key(request) := allow(request) if {
	json.unmarshal(request.keys[0]) == {
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

test_cache_hit_denial_still_denies if {
	vs := violation with input as admission with external_data as cache_hit_denied
	count(vs) == 1
	some v in vs
	v.details.reason == "unsigned"
}

test_denied_object_carries_the_provider_message if {
	vs := violation with input as admission with external_data as deny
	count(vs) == 1
	some v in vs
	v.msg == "verdict content-mismatch (reason: content-mismatch)"
	v.details.reason == "content-mismatch"
}

test_key_holds_review_fields_and_parameters_without_uid if {
	count(violation) == 0 with input as admission with external_data as allow_expected_key
}

test_audit_review_sends_only_what_it_has if {
	audit := {"review": {"object": admission.review.object}, "parameters": admission.parameters}
	key := provider_key with input as audit
	json.unmarshal(key) == {"review": {"object": admission.review.object}, "policy": admission.parameters}
}

test_missing_parameters_are_sent_as_an_empty_policy if {
	key := provider_key with input as {"review": admission.review}
	json.unmarshal(key).policy == {}
}

test_unreachable_provider_is_a_violation if {
	vs := violation with input as admission with external_data as unreachable
	count(vs) == 1
	some v in vs
	contains(v.msg, "connection refused")
	v.details.reason == "provider-error"
}

test_null_responses_are_a_violation if {
	vs := violation with input as admission with external_data as null_responses
	count(vs) == 1
	some v in vs
	contains(v.msg, "responses: null")
}

test_system_error_wins_over_an_answer if {
	vs := violation with input as admission with external_data as system_error_with_answer
	count(vs) == 1
	some v in vs
	contains(v.msg, "deadline exceeded")
}

test_http_error_status_is_a_violation if {
	vs := violation with input as admission with external_data as http_error_without_message
	count(vs) == 1
	some v in vs
	contains(v.msg, "503")
}

test_per_key_error_is_a_violation if {
	vs := violation with input as admission with external_data as key_error
	count(vs) == 1
	some v in vs
	contains(v.msg, "no keys or signers")
	v.details.reason == "request-invalid"
}

test_missing_key_is_a_violation if {
	vs := violation with input as admission with external_data as missing_key
	count(vs) == 1
	some v in vs
	contains(v.msg, "0 answers")
}

test_empty_answer_is_a_violation if {
	vs := violation with input as admission with external_data as empty_answer
	count(vs) == 1
}

test_duplicate_answers_are_a_violation if {
	vs := violation with input as admission with external_data as duplicate_answers
	count(vs) == 1
	some v in vs
	contains(v.msg, "2 answers")
}

test_malformed_value_is_a_violation if {
	vs := violation with input as admission with external_data as malformed_value
	count(vs) == 1
	some v in vs
	contains(v.msg, "malformed")
}

test_allowed_given_as_a_string_is_a_violation if {
	vs := violation with input as admission with external_data as allowed_as_string
	count(vs) == 1
}

test_allowed_missing_is_a_violation if {
	vs := violation with input as admission with external_data as allowed_missing
	count(vs) == 1
}

test_response_that_is_not_an_object_is_a_violation if {
	vs := violation with input as admission with external_data as not_an_object
	count(vs) == 1
}
