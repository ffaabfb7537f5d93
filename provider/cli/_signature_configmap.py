"""``sign -o k8s://ConfigMap/NAMESPACE/NAME``: message and signature in a ConfigMap, as ``kubectl sigstore`` writes it.

What upstream writes (sigstore/k8s-manifest-sigstore 612a7bb):

* ``cmd/kubectl-sigstore/cli/sign.go``: an ``-o`` that starts with ``k8s://``
  makes a signature ConfigMap instead of a signed manifest; with
  ``--apply-signature-configmap`` it is created (or its ``data`` replaced) in
  the cluster, without it written to a file named by
  ``pkg/k8smanifest/sign.go`` ``K8sResourceRef2FileName``:
  ``k8s://ConfigMap/ns/cm`` -> ``k8s_ConfigMap_ns_cm.yaml``, in the current
  directory. The objects themselves are not written: they carry nothing;
* ``pkg/k8smanifest/sign.go`` ``generateSignatureConfigMap``: the reference
  is ``k8s://<ConfigMap|configmaps|cm>/NAMESPACE/NAME``; the ConfigMap has that
  name and namespace, no labels, no annotations, and ``data`` = the map
  ``pkg/cosign/sign.go`` ``SignBlob`` returns -- ``message``
  (base64 of gzip of the payload ``P``), ``signature`` (base64), and for
  keyless signing ``certificate`` and ``bundle`` (base64 of gzip): the
  annotation values under their base names;
* ``pkg/k8smanifest/verify.go`` reads it back by those ``data`` keys
  (``getSignatureSets``), which is also what
  :func:`provider.signatures.sources.configmap_envelope` reads.

Here the same ``data``, from the same payload bytes as a signed manifest's
message (:func:`provider.signatures.signing.message_payload`), with two differences that
upstream's reader ignores: the ConfigMap carries ``apiVersion: v1`` and
``kind: ConfigMap`` (upstream marshals the Go struct without its type, so its
file cannot be given to ``kubectl apply`` as it is), and the label
``app.kubernetes.io/managed-by: manifest-provider``, so that
``--apply-signature-configmap`` replaces only a ConfigMap it wrote: one of the
same name that something else owns is left alone
(:class:`provider.kube.writer.KubeWriter`).

A ConfigMap is readable by whoever may read ConfigMaps in its namespace, so a
Secret (or a ``--sensitive-kind``) is never signed into one: its values would
be in the message.
"""

from __future__ import annotations

import base64
import sys
from pathlib import Path
from typing import Any

from ..errors import PolicyError, RequestError
from ..keys.pem import PrivateKeyTypes, sign_bytes
from ..objects import ObjectIdentity
from ..signatures.envelope import encode_message
from ..signatures.signing import dump_yaml, is_sensitive, message_payload
from ..signatures.sources import IN_CLUSTER_PREFIX, ConfigMapRef
from . import EXIT_OK

#: The owner label of a signature ConfigMap this command writes (kubernetes' recommended labels).
MANAGED_BY = {"app.kubernetes.io/managed-by": "manifest-provider"}


def is_configmap_output(output: str | None) -> bool:
    return bool(output) and str(output).startswith(IN_CLUSTER_PREFIX)


def parse_output(output: str) -> ConfigMapRef:
    try:
        return ConfigMapRef.parse(output, "-o")
    except PolicyError as exc:
        raise RequestError(exc.message) from None


def file_name(ref: ConfigMapRef) -> str:
    """Upstream's file name for a reference (``K8sResourceRef2FileName``), with the kind as written in ``-o``."""
    return f"k8s_ConfigMap_{ref.namespace}_{ref.name}.yaml"


def signature_configmap(
    documents: list[dict[str, Any]],
    key: PrivateKeyTypes,
    ref: ConfigMapRef,
    *,
    domain: str,
    sensitive_kinds: frozenset[str],
) -> dict[str, Any]:
    """The signature ConfigMap for ``documents`` (module docstring)."""
    for doc in documents:
        if is_sensitive(doc, sensitive_kinds):
            raise RequestError(
                f"-o {ref}: the message would be kept in a ConfigMap, where anyone who may read ConfigMaps in "
                f"{ref.namespace} reads it: {ObjectIdentity.of(doc).describe()} holds secret values. Sign it into "
                "its own annotations instead"
            )
    _, payload = message_payload(documents, domain=domain, sensitive_kinds=sensitive_kinds)
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": ref.name, "namespace": ref.namespace, "labels": dict(MANAGED_BY)},
        "data": {
            "message": encode_message(payload),
            "signature": base64.b64encode(sign_bytes(key, payload)).decode(),
        },
    }


def write(configmap: dict[str, Any], ref: ConfigMapRef, *, apply: bool, kubeconfig: str | None) -> int:
    """Write the ConfigMap to upstream's file, or with ``apply`` to the cluster; say where on standard error."""
    if not apply:
        target = file_name(ref)
        Path(target).write_text(dump_yaml([configmap]))
        print(f"signature ConfigMap {ref} -> {target} (apply it, or sign with --apply-signature-configmap)",
              file=sys.stderr)  # fmt: skip
        return EXIT_OK
    from ..kube.dryrun import dry_runner_for
    from ..kube.writer import KubeWriter

    runner = dry_runner_for(kubeconfig)
    try:
        writer = KubeWriter(runner, labels=MANAGED_BY, same=lambda current, new: current.get("data") == new["data"])
        outcome = writer.write(configmap)
    finally:
        runner.close()
    print(f"signature ConfigMap {ref}: {outcome}", file=sys.stderr)
    return EXIT_OK
