"""Run Gatekeeper ConstraintTemplates under a real OPA engine, with Gatekeeper's ``external_data``.

The engine is OPA itself (``opa-golib-python-bindings`` embeds OPA's Go
library), so the Rego is parsed, compiled and evaluated exactly as OPA does.
Gatekeeper adds one builtin, ``external_data``; :class:`GatekeeperExternalData`
reproduces what it hands the Rego, from Gatekeeper's source
(``frameworks/constraint/pkg/externaldata``):

* ``{"responses": [[key, value], ...], "errors": [[key, error], ...],
  "status_code": <HTTP status>, "system_error": "<provider systemError>"}``
  for an answered request (``NewRegoResponse``);
* ``{"responses": null, "errors": null, "status_code": N, "system_error": "..."}``
  when the call failed -- provider unknown, TLS, timeout, non-200
  (``HandleError``);
* keys answered from the response cache are not sent; when every key came
  from the cache no request is made and ``status_code`` stays 0.

Requests go out as Gatekeeper sends them: ``POST`` of a ``ProviderRequest``
(``externaldata.gatekeeper.sh/v1beta1``) with ``Content-Type:
application/json``, over TLS 1.3 presenting Gatekeeper's client certificate.

Which Rego a template carries, and whether Gatekeeper would take it at all, is
``tests/support/gatekeeper_framework.py``'s business (the constraint framework's
ingestion rules); :func:`parse_rego` is the OPA parser it uses. Violations are
read as Gatekeeper's hook module reads them (``drivers/rego/rego.go``
``hookModuleRego``): an entry without ``msg`` is dropped -- silently allowed --
and ``details`` defaults to ``{}``.
"""

from __future__ import annotations

import http.client
import json
import re
import ssl
import time
import urllib.parse
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from opa_bindings import OpaEngine

from tests.support.gatekeeper_framework import rego_source

#: Gatekeeper's wire constants (frameworks/constraint/pkg/externaldata).
PROVIDER_API_VERSION = "externaldata.gatekeeper.sh/v1beta1"
#: Gatekeeper's default external-data response cache TTL (``--external-data-provider-response-cache-ttl``).
DEFAULT_CACHE_TTL = 180.0

ExternalData = Callable[[dict[str, Any]], dict[str, Any]]


def handle_error(status_code: int, message: str) -> dict[str, Any]:
    """What ``external_data`` returns when the call to the provider failed."""
    return {"responses": None, "errors": None, "status_code": status_code, "system_error": message}


class GatekeeperExternalData:
    """Gatekeeper's ``external_data`` builtin, calling real providers over HTTPS."""

    def __init__(
        self,
        providers: dict[str, str],
        ssl_context: ssl.SSLContext,
        *,
        timeout: float = 3.0,
        cache_ttl: float = DEFAULT_CACHE_TTL,
    ) -> None:
        self.providers = providers
        self.ssl_context = ssl_context
        self.timeout = timeout
        self.cache_ttl = cache_ttl
        self.cache: dict[tuple[str, str], tuple[float, dict[str, Any]]] = {}
        #: Every ProviderRequest body sent, for tests that look at the wire.
        self.sent: list[dict[str, Any]] = []

    def __call__(self, request: dict[str, Any]) -> dict[str, Any]:
        name = request.get("provider")
        url = self.providers.get(str(name))
        if url is None:
            return handle_error(400, f"failed to get value {name} from cache: key not found")
        keys = [str(k) for k in request.get("keys") or []]
        now = time.monotonic()
        items: list[dict[str, Any]] = []
        missing: list[str] = []
        for key in keys:
            hit = self.cache.get((str(name), key))
            if hit is not None and now - hit[0] <= self.cache_ttl:
                items.append(hit[1])
            else:
                missing.append(key)
        status_code = 0
        system_error = ""
        if missing:
            try:
                status_code, answer = self._send(url, missing)
            except (OSError, http.client.HTTPException, ValueError) as exc:
                return handle_error(500, f"failed to send external data request: {exc}")
            if status_code != 200:
                return handle_error(status_code, f"provider answered with HTTP status {status_code}")
            response = answer.get("response") or {}
            fresh = response.get("items") or []
            for item in fresh:
                self.cache[(str(name), str(item.get("key")))] = (now, item)
            items.extend(fresh)
            system_error = response.get("systemError") or ""
        responses = [[i.get("key"), i.get("value")] for i in items if not i.get("error")]
        errors = [[i.get("key"), i.get("error")] for i in items if i.get("error")]
        return {"responses": responses, "errors": errors, "status_code": status_code, "system_error": system_error}

    def _send(self, url: str, keys: list[str]) -> tuple[int, dict[str, Any]]:
        body = {"apiVersion": PROVIDER_API_VERSION, "kind": "ProviderRequest", "request": {"keys": keys}}
        self.sent.append(body)
        parts = urllib.parse.urlsplit(url)
        if parts.scheme != "https":
            raise ValueError("only HTTPS scheme is supported")  # as Gatekeeper's getClient
        conn = http.client.HTTPSConnection(
            parts.hostname or "", parts.port or 443, context=self.ssl_context, timeout=self.timeout
        )
        try:
            conn.request("POST", parts.path or "/", body=json.dumps(body), headers={"Content-Type": "application/json"})
            resp = conn.getresponse()
            data = resp.read()
        finally:
            conn.close()
        return resp.status, (json.loads(data) if resp.status == 200 else {})


def gatekeeper_client_context(ca_file: str | Path, cert_file: str | Path, key_file: str | Path) -> ssl.SSLContext:
    """The TLS settings Gatekeeper uses for providers: TLS 1.3, the Provider's caBundle, its own client certificate."""
    context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=str(ca_file))
    context.minimum_version = ssl.TLSVersion.TLSv1_3
    context.load_cert_chain(str(cert_file), str(key_file))
    return context


_PACKAGE_RE = re.compile(r"^package\s+([\w.]+)", re.MULTILINE)
_TEST_RE = re.compile(r"^(test_\w+)\s+if\b", re.MULTILINE)


def package_of(source: str) -> str:
    match = _PACKAGE_RE.search(source)
    if match is None:
        raise ValueError("Rego module without a package line")
    return match.group(1)


def template_rego(template_path: Path) -> str:
    """The Rego Gatekeeper compiles for a ConstraintTemplate's one target (the ``rego`` field or ``code``)."""
    template = yaml.safe_load(template_path.read_text())
    (target,) = template["spec"]["targets"]
    return rego_source(target).rego


_parser: OpaEngine | None = None


def parse_rego(source: str) -> dict[str, Any]:
    """OPA's JSON AST of one module (``rego.parse_module``, Rego v1 syntax); raises on a parse error."""
    global _parser
    if _parser is None:
        _parser = OpaEngine()
    rows = _parser.eval_query('m := rego.parse_module("module.rego", input.source)', {"source": source})
    if not rows:
        raise ValueError("rego.parse_module gave no result")
    return dict(rows[0]["m"])


def _no_provider(request: dict[str, Any]) -> dict[str, Any]:
    raise RuntimeError("external_data was called but no provider is configured")


class ConstraintTemplateEngine:
    """One ConstraintTemplate's Rego in an OPA engine, evaluated as Gatekeeper does."""

    def __init__(self, rego: str, external_data: ExternalData | None = None, *, tests: str | None = None) -> None:
        self.package = package_of(rego)
        self.engine = OpaEngine()
        self.engine.print_handler = lambda message, location: None
        # Gatekeeper always has the builtin; without a provider to call, a call is an error.
        self.engine.register_function("external_data", external_data or _no_provider, arity=1)
        self.engine.add_policy("src.rego", rego)
        self.test_names: list[str] = []
        if tests is not None:
            self.engine.add_policy("src_test.rego", tests)
            self.test_names = _TEST_RE.findall(tests)

    def violations(self, review: dict[str, Any], parameters: dict[str, Any] | None = None) -> list[dict[str, Any]]:
        """Gatekeeper's input is ``{"review": ..., "parameters": ...}``; the results as its hook module keeps them.

        The hook builds each result from ``r.msg`` and ``object.get(r, "details", {})``:
        a violation without ``msg`` yields no result at all, so the object is admitted.
        """
        rows = self.engine.eval_query(
            f"v := data.{self.package}.violation", {"review": review, "parameters": parameters or {}}
        )
        raw = list(rows[0]["v"]) if rows else []
        return [{"msg": v["msg"], "details": v.get("details", {})} for v in raw if isinstance(v, dict) and "msg" in v]

    def passes(self, test_name: str) -> bool:
        rows = self.engine.eval_query(f"x := data.{self.package}.{test_name}")
        return bool(rows) and rows[0].get("x") is True

    def close(self) -> None:
        self.engine.close()
