"""One request of each kind that makes the service call its cluster, and the fake API server that answers them.

* :func:`cluster_info` -- a Gatekeeper key for the ``cluster-info`` check: a
  bootstrap-token Secret read (``CoreV1Api``);
* :func:`dry_run` -- a Gatekeeper key whose object differs from its signed
  manifest by defaults only: discovery and a dry-run create;
* :func:`configmap_signature` -- a Gatekeeper key whose signature lives in a
  ConfigMap (``signatureResourceRef``): a ConfigMap GET;
* :func:`token_review` -- a Kyverno call with a bearer token and no client
  certificate: a TokenReview.

Each returns the outcome as one word: the verdict's reason, or the
``systemError``'s / the refusal's reason when the service could not answer.
:func:`fake_cluster` is the :class:`~tests.support.fakeapi.TokenApi` holding
what they read; :func:`service_env` points the service at it and lets both
callers in. Used by the service's identity and first-call tests and by
``bench/first_call.py``.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

from provider.service.devcerts import CLIENT_NAME
from tests.support.bootstrap import TOKEN_ID, secret
from tests.support.bootstrap import cluster_info as cluster_info_object
from tests.support.data import UPSTREAM, load_yaml
from tests.support.fakeapi import TokenApi
from tests.support.keys import make_key, public_key_pem
from tests.support.manifests import configmap, sign
from tests.support.server import Server
from tests.support.tokenreview import AUDIENCE, KYVERNO_USER, Identity

GATEKEEPER = "/v1/gatekeeper/verify"
KYVERNO = "/v1/kyverno/verify"
#: The token Kyverno's admission controller presents (the fake's TokenReviews accept it for AUDIENCE).
KYVERNO_TOKEN = "kyverno-admission-controller-token"
LIVE_OBJECT = UPSTREAM / "manifests" / "deploy-live-object-needs-dryrun.yaml"
UPSTREAM_KEY = UPSTREAM / "keys" / "testpub.pem"
SIGNATURE_KEY = make_key("ecdsa-p256", 33)
SIGNED_CONFIGMAP = configmap("app", "default", mode="production")
SIGNATURE_REF = "k8s://ConfigMap/default/app-signature"


def fake_cluster() -> TokenApi:
    """The fake API server (not started) holding a bootstrap token, a signature ConfigMap and Kyverno's token."""
    fake = TokenApi(secrets={f"bootstrap-token-{TOKEN_ID}": secret()})
    fake.reviewable[KYVERNO_TOKEN] = Identity([AUDIENCE])
    (signed,) = sign([SIGNED_CONFIGMAP], SIGNATURE_KEY)
    annotations = signed["metadata"]["annotations"]
    fake.add(configmap("app-signature", "default", message=annotations["cosign.sigstore.dev/message"],
                       signature=annotations["cosign.sigstore.dev/signature"]))  # fmt: skip
    return fake


def service_env(**extra: str) -> dict[str, str]:
    """The service's settings: tokens reviewed for Kyverno's audience, the dev client certificate and Kyverno as callers."""
    return {"MANIFEST_PROVIDER_TOKEN_AUDIENCE": AUDIENCE,
            "MANIFEST_PROVIDER_CALLERS": f"cert:{CLIENT_NAME},token:{KYVERNO_USER}", **extra}  # fmt: skip


def _gatekeeper(server: Server, key: dict[str, Any]) -> str:
    body = {"apiVersion": "externaldata.gatekeeper.sh/v1beta1", "kind": "ProviderRequest",
            "request": {"keys": [json.dumps(key)]}}  # fmt: skip
    status, _, data = server.post(GATEKEEPER, json.dumps(body).encode())
    assert status == 200, data[:300]
    answer = json.loads(data)["response"]
    if answer["systemError"]:
        return str(answer["systemError"]).split(":")[0]
    item = answer["items"][0]
    return str(item["value"]["reason"]) if "value" in item else str(item["error"]).split(":")[0]


def live_review() -> dict[str, Any]:
    (obj,) = load_yaml(LIVE_OBJECT)
    return {"uid": "u", "operation": "CREATE", "namespace": obj["metadata"].get("namespace", "default"),
            "userInfo": {"username": "jane@example.com", "groups": ["system:authenticated"]}, "object": obj}  # fmt: skip


def cluster_info(server: Server) -> str:
    review = {"operation": "UPDATE", "userInfo": {"username": "system:serviceaccount:kube-system:bootstrap-signer"},
              "object": cluster_info_object()}  # fmt: skip
    return _gatekeeper(server, {"check": "cluster-info", "review": review})


def dry_run(server: Server) -> str:
    policy = {"keys": [UPSTREAM_KEY.read_text()], "dryRun": {"enabled": True}}
    return _gatekeeper(server, {"review": live_review(), "policy": policy})


def configmap_signature(server: Server) -> str:
    policy = {"keys": [public_key_pem(SIGNATURE_KEY)], "signatureResourceRef": SIGNATURE_REF}
    return _gatekeeper(server, {"review": {"operation": "CREATE", "object": SIGNED_CONFIGMAP}, "policy": policy})


def token_review(server: Server) -> str:
    """The outcome of a Kyverno call authenticated by a token alone: its verdict's reason (an unsigned object), or the refusal's."""
    body = json.dumps({"request": {"operation": "CREATE", "object": SIGNED_CONFIGMAP},
                       "policy": {"keys": [public_key_pem(SIGNATURE_KEY)]}})  # fmt: skip
    status, _, data = server.request(
        "POST", KYVERNO, body.encode(), {"Authorization": f"Bearer {KYVERNO_TOKEN}"}, client_cert=False
    )
    answer = json.loads(data)
    return str(answer["reason"]) if status == 200 else f"{status} {answer.get('reason', answer.get('error'))}"


@contextlib.contextmanager
def cpu_hogs(count: int = 2) -> Iterator[None]:
    """``count`` processes spinning at the default priority: both cores of the test machine busy."""
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(count)]
    try:
        yield
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
