"""Attack class: **Kyverno runs the writer's JMESPath inside the denial message.**

The shipped ClusterPolicy's message is ``"{{ verdict.message }} (reason: ...)"``;
Kyverno substitutes it and scans the result again (``tests/support/kyverno_vars.py``
reproduces its rules from the source), and our message quotes admitted values. A
writer who puts ``{{ request.object.data }}`` in a field got the expression run:
another field's value in the message, or a lookup error that blanks it. Every
string of the Kyverno answer is escaped the way Kyverno's own scanner skips.
"""

from __future__ import annotations

import contextlib
import json
from typing import Any

import pytest
from flask.testing import FlaskClient
from hypothesis import given, settings
from hypothesis import strategies as st

from provider.service.app import create_app
from provider.service.routes import KYVERNO_PATH
from provider.service.wire import kyverno
from tests.support.keys import make_key, public_key_pem
from tests.support.kyverno import APICALL, policy_doc, stored_verdict
from tests.support.kyverno_vars import Context, SubstitutionError, deny_message, substitute_text
from tests.support.manifests import configmap, sign

SHIPPED = policy_doc(APICALL)
TEMPLATE = SHIPPED["spec"]["rules"][0]["validate"]["message"]
#: What the shipped template itself looks up.
TEMPLATE_VARIABLES = ["verdict.message", "verdict.reason"]
SECRET = "s3cr3t-password"

#: Expressions a writer puts in a field; unescaped, each one runs (or fails and blanks the message).
ATTACKS = [
    "{{ request.object.data.password }}",
    "{{request.object.data.password}}",
    "x{{ request.object.data.password }}y",
    "{{{ request.object.data.password }}}",
    "{{- request.object.data.password }}",
    "{{ to_string(request.object) }}",
    "{{ {a: request.object.data.password} }}",
    "{{ nonexistent.path }}",  # a lookup error blanks the whole message
]
#: Texts that run nothing either way, and must still come through beside an attack.
AWKWARD = ["\\{{ request.object.data.password }}", "}}{{", "a\\", "{a}"]


def _admission(obj: dict[str, Any]) -> dict[str, Any]:
    return {"uid": "u", "operation": "CREATE", "userInfo": {"username": "mallory"}, "namespace": "ns", "object": obj}


def _kyverno_view(answer_json: str, obj: dict[str, Any]) -> tuple[str, Context]:
    """What Kyverno makes of our answer: the jmesPath of the shipped policy, then getDenyMessage."""
    verdict = stored_verdict(SHIPPED, json.loads(answer_json))
    context = Context({"verdict": verdict, "request": _admission(obj)})
    return deny_message(TEMPLATE, context), context


@pytest.fixture
def client() -> Any:
    app = create_app({"TESTING": True, "LOG_LEVEL": "warning"})
    yield app.test_client()
    app.extensions["manifest_provider"].dispatcher.shutdown()


@pytest.mark.parametrize(("hostile", "awkward"), [(a, AWKWARD[i % len(AWKWARD)]) for i, a in enumerate(ATTACKS)])
def test_a_tampered_value_runs_nothing_in_kyvernos_message(client: FlaskClient, hostile: str, awkward: str) -> None:
    key = make_key()
    (signed,) = sign(configmap("cm", "ns", password=SECRET, note="honest"), key)
    tampered = json.loads(json.dumps(signed))
    tampered["data"]["note"] = f"{hostile} | {awkward}"
    body = {"request": _admission(tampered), "policy": {"keys": [public_key_pem(key)]}}
    response = client.post(KYVERNO_PATH, data=json.dumps(body))
    answer = response.get_data(as_text=True)
    assert json.loads(answer)["reason"] == "content-mismatch"

    message, context = _kyverno_view(answer, tampered)
    assert context.looked_up == TEMPLATE_VARIABLES, context.looked_up
    assert SECRET not in message
    if "{{{" not in hostile:
        assert tampered["data"]["note"] in message, message  # the writer's text reads as written

    # The same answer unescaped, as it was: the model runs the writer's expression.
    raw = json.loads(answer)
    raw["message"] = raw["message"].replace(kyverno.escape_variables(hostile), hostile)
    _, before = _kyverno_view(json.dumps(raw), tampered)
    assert before.looked_up != TEMPLATE_VARIABLES


def test_an_unusable_body_quoting_the_request_runs_nothing(client: FlaskClient) -> None:
    """A denial that is not a verdict (an invalid policy naming a field) is escaped too."""
    obj = configmap("cm", "ns", password=SECRET)
    body = {"request": _admission(obj), "policy": {"keys": ["k"], "{{ request.object.data.password }}": 1}}
    answer = client.post(KYVERNO_PATH, data=json.dumps(body)).get_data(as_text=True)
    assert "request.object.data.password" in json.loads(answer)["message"]
    message, context = _kyverno_view(answer, obj)
    assert context.looked_up == TEMPLATE_VARIABLES and SECRET not in message


def test_every_string_of_the_answer_is_escaped_keys_included() -> None:
    """A policy may template any field of the answer (``{{ verdict.diff }}``): a diff's key is a field name."""
    value = {"allowed": False, "verified": False, "reason": "content-mismatch", "message": "m", "signers": [],
             "diff": [{"key": "data.{{ request.object }}", "values": {"before": None, "after": {"{{ a }}": "{{ b }}"}}}]}  # fmt: skip
    escaped = json.loads(kyverno.encode_answer(_verdict(value)))
    context = Context({"verdict": escaped, "request": {"object": {}}, "a": 1, "b": 2})
    substitute_text("{{ verdict.diff }}", context)  # a whole-value variable is the value itself, not rescanned
    assert context.looked_up == ["verdict.diff"]
    context = Context({"verdict": escaped, "request": {"object": {}}, "a": 1, "b": 2})
    out = substitute_text("diff: {{ verdict.diff }}", context)
    assert context.looked_up == ["verdict.diff"], context.looked_up
    assert "{{ request.object }}" in out and "{{ a }}" in out


def _verdict(value: dict[str, Any]) -> Any:
    class Stub:
        pass

    stub = Stub()
    stub.value = json.dumps(value, separators=(",", ":"))  # type: ignore[attr-defined]
    return stub


_TEXT = st.text(alphabet="{}\\ab .-|@$()", max_size=24)
_SURROUNDING = st.text(alphabet="ab .:()-", max_size=8)


@settings(max_examples=400, deadline=None)
@given(text=_TEXT, before=_SURROUNDING, after=_SURROUNDING | _TEXT)
def test_no_text_escaped_runs_anything_in_any_template(text: str, before: str, after: str) -> None:
    """Whatever the text and whatever the template puts around the variable, only the template's variable runs."""
    template = f"{before}{{{{ verdict.message }}}}{after}"
    # What the template alone looks up (its own text may hold variables too).
    alone = Context({"verdict": {"message": "plain"}, "a": "A", "b": "B"})
    try:
        substitute_text(template, alone)
    except SubstitutionError:  # a template Kyverno cannot substitute says nothing about the text
        return
    context = Context({"verdict": {"message": kyverno.escape_variables(text)}, "a": "A", "b": "B"})
    with contextlib.suppress(SubstitutionError):  # only what was looked up matters
        substitute_text(template, context)
    assert context.looked_up == alone.looked_up, (template, text, context.looked_up)


@settings(max_examples=300, deadline=None)
@given(text=st.text(alphabet="{}\\ab .", max_size=24))
def test_the_text_reads_back_as_written(text: str) -> None:
    """Kyverno's final unescape restores the text, but for the two documented marks."""
    context = Context({"verdict": {"message": kyverno.escape_variables(text)}})
    shown = substitute_text("{{ verdict.message }} (end)", context)
    if "{{{" not in text and not text.endswith("{"):
        assert shown == f"{text} (end)"
