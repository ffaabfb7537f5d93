"""A ValidatingWebhookConfiguration checked as the API server checks one, and its matchConditions as it runs them.

No API server runs here: :func:`problems` holds the rules of
``ValidateValidatingWebhookConfiguration`` (kubernetes/kubernetes
``pkg/apis/admissionregistration/validation/validation.go`` at
afd5df58bd7dcb7b8c3f00e2065936bd0c508b77): each webhook's name fully
qualified (a DNS subdomain of at least three segments) and unique;
``admissionReviewVersions`` DNS-1035 labels, no duplicate, at least one of
``v1``/``v1beta1``; ``sideEffects`` required and ``None`` or ``NoneOnDryRun``;
``failurePolicy`` ``Ignore``/``Fail``; ``matchPolicy`` ``Exact``/``Equivalent``;
``timeoutSeconds`` from 1 to 30; rules with operations from ``*``, ``CREATE``,
``UPDATE``, ``DELETE``, ``CONNECT`` (``*`` alone), apiGroups and apiVersions
given (``*`` alone), resources by ``validateResources`` (``*/*`` alone; not
``x/*`` beside ``x/y``); exactly one of ``url`` or ``service``, a service's
path starting with ``/``; label selectors valid; at most 64 ``matchConditions``
with unique qualified names, each a CEL expression of type bool.

A matchCondition is type-checked in the environment the API server gives
webhooks (k8s.io/apiserver ``pkg/admission/plugin/webhook/matchconditions``:
``object``, ``oldObject`` and ``request``, the request typed as
``pkg/admission/plugin/cel/compile.go`` ``BuildRequestType`` declares it; the
``authorizer`` is not modelled, so an expression using it is refused here) with
cel-expr-python, and evaluated with cel-python on a real request.
"""

from __future__ import annotations

import re
from typing import Any

import celpy

from tests.support.apiserver_webhook import is_qualified_name

_DNS1035 = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?\Z")
_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*\Z")
OPERATIONS = {"*", "CREATE", "UPDATE", "DELETE", "CONNECT"}


def _label_selector(selector: Any, where: str) -> list[str]:
    errors = []
    if not isinstance(selector, dict):
        return [f"{where}: not a label selector"]
    for key in selector.get("matchLabels") or {}:
        if not is_qualified_name(key):
            errors.append(f"{where}.matchLabels: {key!r} is not a qualified name")
    for i, expression in enumerate(selector.get("matchExpressions") or []):
        operator, values = expression.get("operator"), expression.get("values") or []
        if not is_qualified_name(str(expression.get("key"))):
            errors.append(f"{where}.matchExpressions[{i}].key: not a qualified name")
        if operator in ("In", "NotIn") and not values:
            errors.append(f"{where}.matchExpressions[{i}].values: must be specified for In or NotIn")
        elif operator in ("Exists", "DoesNotExist") and values:
            errors.append(f"{where}.matchExpressions[{i}].values: may not be specified for Exists or DoesNotExist")
        elif operator not in ("In", "NotIn", "Exists", "DoesNotExist"):
            errors.append(f"{where}.matchExpressions[{i}].operator: {operator!r} is not a valid selector operator")
    return errors


def _resources(resources: list[str], where: str) -> list[str]:
    errors = [] if resources else [f"{where}: Required value"]
    wild_sub: set[str] = set()
    wild_res: set[str] = set()
    for entry in resources:
        if not entry:
            errors.append(f"{where}: an empty resource")
            continue
        res, slash, sub = entry.partition("/")
        if not slash:
            continue
        if res in wild_sub:
            errors.append(f"{where}: if '{res}/*' is present, must not specify {entry}")
        if sub in wild_res:
            errors.append(f"{where}: if '*/{sub}' is present, must not specify {entry}")
        if sub == "*":
            wild_sub.add(res)
        if res == "*":
            wild_res.add(sub)
    if len(resources) > 1 and "*/*" in resources:
        errors.append(f"{where}: if '*/*' is present, must not specify other resources")
    if "*" in resources and any("/" not in r and r != "*" for r in resources):
        errors.append(f"{where}: if '*' is present, must not specify other resources without subresources")
    return errors


def problems(config: dict[str, Any]) -> list[str]:
    """What the API server refuses in a ValidatingWebhookConfiguration (module docstring)."""
    errors: list[str] = []
    if (
        config.get("apiVersion") != "admissionregistration.k8s.io/v1"
        or config.get("kind") != "ValidatingWebhookConfiguration"
    ):
        return ["not an admissionregistration.k8s.io/v1 ValidatingWebhookConfiguration"]
    names: set[str] = set()
    for i, hook in enumerate(config.get("webhooks") or []):
        where = f"webhooks[{i}]"
        name = str(hook.get("name", ""))
        if not _SUBDOMAIN.match(name) or len(name) > 253:
            errors.append(f"{where}.name: not a DNS subdomain")
        elif len(name.split(".")) < 3:
            errors.append(f"{where}.name: should be a domain with at least three segments separated by dots")
        if name in names:
            errors.append(f"{where}.name: Duplicate value")
        names.add(name)
        versions = hook.get("admissionReviewVersions") or []
        if not versions or not set(versions) & {"v1", "v1beta1"}:
            errors.append(f"{where}.admissionReviewVersions: must include at least one of v1, v1beta1")
        if len(set(versions)) != len(versions) or not all(_DNS1035.match(v) for v in versions):
            errors.append(f"{where}.admissionReviewVersions: duplicate or invalid version")
        if hook.get("sideEffects") not in ("None", "NoneOnDryRun"):
            errors.append(f"{where}.sideEffects: must be None or NoneOnDryRun")
        if hook.get("failurePolicy", "Fail") not in ("Ignore", "Fail"):
            errors.append(f"{where}.failurePolicy: Unsupported value")
        if hook.get("matchPolicy", "Equivalent") not in ("Exact", "Equivalent"):
            errors.append(f"{where}.matchPolicy: Unsupported value")
        timeout = hook.get("timeoutSeconds", 10)
        if not isinstance(timeout, int) or not 1 <= timeout <= 30:
            errors.append(f"{where}.timeoutSeconds: the timeout value must be between 1 and 30 seconds")
        for j, rule in enumerate(hook.get("rules") or []):
            spot = f"{where}.rules[{j}]"
            operations = rule.get("operations") or []
            if not operations or (len(operations) > 1 and "*" in operations) or set(operations) - OPERATIONS:
                errors.append(f"{spot}.operations: invalid")
            for field in ("apiGroups", "apiVersions"):
                values = rule.get(field) or []
                if not values or (len(values) > 1 and "*" in values):
                    errors.append(f"{spot}.{field}: invalid")
            errors.extend(_resources(rule.get("resources") or [], f"{spot}.resources"))
            if rule.get("scope", "*") not in ("Cluster", "Namespaced", "*"):
                errors.append(f"{spot}.scope: Unsupported value")
        for selector in ("namespaceSelector", "objectSelector"):
            if selector in hook:
                errors.extend(_label_selector(hook[selector], f"{where}.{selector}"))
        client = hook.get("clientConfig") or {}
        if ("url" in client) == ("service" in client):
            errors.append(f"{where}.clientConfig: exactly one of url or service is required")
        service = client.get("service") or {}
        if service:
            if not service.get("name") or not service.get("namespace"):
                errors.append(f"{where}.clientConfig.service: name and namespace are required")
            path = service.get("path", "/")
            if not str(path).startswith("/") or "//" in str(path):
                errors.append(f"{where}.clientConfig.service.path: must start with '/' and hold no '//'")
            if not 1 <= int(service.get("port", 443)) <= 65535:
                errors.append(f"{where}.clientConfig.service.port: not a port")
        conditions = hook.get("matchConditions") or []
        if len(conditions) > 64:
            errors.append(f"{where}.matchConditions: Too many")
        seen: set[str] = set()
        for j, condition in enumerate(conditions):
            spot = f"{where}.matchConditions[{j}]"
            if not is_qualified_name(str(condition.get("name", ""))) or condition.get("name") in seen:
                errors.append(f"{spot}.name: not a unique qualified name")
            seen.add(str(condition.get("name")))
            try:
                kind = match_condition_type(str(condition.get("expression", "")))
            except ValueError as exc:
                errors.append(f"{spot}.expression: {exc}")
                continue
            if kind != "bool":
                errors.append(f"{spot}.expression: must evaluate to bool")
    return errors


def match_condition_type(expression: str) -> str:
    """The type cel-cpp's checker gives ``expression`` in the webhook environment (module docstring)."""
    from cel_expr_python import cel

    from tests.support.kyverno_cel import request_pool

    if not expression.strip():
        raise ValueError("Required value")
    env = cel.NewEnv(
        descriptor_pool=request_pool(),
        variables={
            "object": cel.Type.DYN,
            "oldObject": cel.Type.DYN,
            "request": cel.Type("kubernetes.AdmissionRequest"),
        },
    )
    try:
        compiled = env.compile(expression)
    except RuntimeError as exc:
        raise ValueError(str(exc)) from None
    return str(compiled.return_type().name()).lower()


def match_condition_holds(expression: str, request: dict[str, Any]) -> bool:
    """``expression`` evaluated on ``request`` (an AdmissionRequest as the API server converts it)."""
    env = celpy.Environment()
    program = env.program(env.compile(expression))
    activation = {
        "request": celpy.json_to_cel(request),
        "object": celpy.json_to_cel(request.get("object")),
        "oldObject": celpy.json_to_cel(request.get("oldObject")),
    }
    result = program.evaluate(activation)
    if not isinstance(result, celpy.celtypes.BoolType):
        raise ValueError(f"{expression!r} gave {result!r}, not a bool")
    return bool(result)
