"""Keys kept in Kubernetes Secrets: :class:`SecretKeyRef`, how a policy names one, and the port that reads it.

Operators rotate a key by updating one Secret, not every policy. The policy
names the Secret in one of three spellings, all read to one
:class:`SecretKeyRef`:

* ``k8s://NAMESPACE/NAME`` -- cosign's key reference (sigstore/cosign v3.1.2
  ``pkg/cosign/kubernetes/secret.go``: ``KeyReference = "k8s://"``,
  ``parseRef`` splits ``<namespace>/<secret>``, nothing else), which
  ``kubectl sigstore verify -k`` takes through cosign
  (sigstore/k8s-manifest-sigstore 612a7bb ``pkg/cosign/verify.go`` calls
  ``sigs.PublicKeyFromKeyRef``) and Kyverno documents for ``publicKeys``
  (kyverno v1.19.0 ``api/kyverno/v1/image_verification_types.go``
  ``StaticKeyAttestor.PublicKeys``). The public key is the Secret's
  ``cosign.pub`` (cosign ``pkg/signature/keys.go``
  ``PublicKeyFromKeyRefWithHashAlgo``: ``LoadPublicKeyRaw(s.Data["cosign.pub"])``;
  ``secret()`` in ``secret.go`` writes ``cosign.key``, ``cosign.pub`` and
  ``cosign.password`` into that one Secret);
* ``{secretRef: {namespace, name, key}}`` -- a ``keys`` entry of our own schema,
  ``key`` defaulting to ``cosign.pub``;
* ``keys: {secret: {namespace, name}}`` in an attestor entry -- Kyverno's
  spelling (``StaticKeyAttestor.Secret``, ``SecretReference{Name, Namespace}``,
  "The provided secret must contain a key named cosign.pub"; kyverno v1.19.0
  ``pkg/engine/internal/imageverifier.go`` turns it into
  ``k8s://<namespace>/<name>``). ``key`` is accepted there too.

What the Secret's value must be: one public key (PEM ``PUBLIC KEY``,
``CERTIFICATE``) or one armored OpenPGP certificate, loaded through the same
door as an inline key (:func:`provider.keys.trusted.load_trusted_keys`), so the
rules of :mod:`provider.keys.rules` judge it. Exactly one: cosign reads the
first PEM block and ignores the rest, which would let a second key ride in a
Secret unseen; an entry is one key, as an inline ``publicKey`` entry is.

No reference may name a key pair's private half (``cosign.key``,
``cosign.password``): the service never reads one. A value that is not a key
is refused without a parser's words about it (:func:`load_secret_key`).

Who may name which Secret is the operator's bound
(:attr:`provider.bounds.Bounds.key_secret_namespaces`), checked when the
policy is read, before anything is asked of the cluster. The Secret is read at
verification time through the :class:`KeySecretReader` port (the service's:
:class:`provider.kube.keysecrets.KubeKeySecretReader`), so a rotated key is
used within the reader's time-to-live without a change to any policy.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from ..bounds import Bounds
from ..errors import PolicyError
from ..objects import DNS_LABEL, DNS_SUBDOMAIN
from ..readers import check_fields, read_str
from .pem import PublicKey
from .trusted import is_openpgp_key, load_trusted_keys

if TYPE_CHECKING:
    from .openpgp import OpenPGPKey

#: cosign's reference prefix for a key in a Secret (``pkg/cosign/kubernetes/secret.go`` ``KeyReference``).
KEY_REFERENCE = "k8s://"
#: The data key cosign, kubectl sigstore and Kyverno read the public key from.
DEFAULT_KEY = "cosign.pub"
#: Data keys of a cosign key-pair Secret that hold the private half (``secret.go`` ``secret()``).
PRIVATE_KEYS = ("cosign.key", "cosign.password")

#: A Secret's data key (k8s.io/apimachinery ``validation.IsConfigMapKey``: ``[-._a-zA-Z0-9]+``, at most 253).
_DATA_KEY = re.compile(r"[-._a-zA-Z0-9]{1,253}\Z")


@dataclass(frozen=True)
class SecretKeyRef:
    """One public key kept in a Secret: ``data[key]`` of Secret ``namespace/name``."""

    namespace: str
    name: str
    key: str = DEFAULT_KEY
    #: The entry's ``name``, for verdicts.
    label: str | None = None

    def __str__(self) -> str:
        ref = f"{KEY_REFERENCE}{self.namespace}/{self.name}"
        return ref if self.key == DEFAULT_KEY else f"{ref} (key {self.key})"

    def describe(self) -> str:
        return f"{self.label} ({self})" if self.label else str(self)


def _checked(namespace: str, name: str, key: str, where: str, label: str | None) -> SecretKeyRef:
    if not DNS_LABEL.match(namespace):
        raise PolicyError(f"{where}: {namespace[:80]!r} is not a namespace name")
    if not DNS_SUBDOMAIN.match(name):
        raise PolicyError(f"{where}: {name[:80]!r} is not a Secret name")
    if not _DATA_KEY.match(key):
        raise PolicyError(f"{where}: {key[:80]!r} is not a Secret data key")
    if key in PRIVATE_KEYS:
        raise PolicyError(
            f"{where}: {key!r} is the private half of a cosign key pair; a policy names the public key "
            f"({DEFAULT_KEY}), and the service never reads a private key or its password"
        )
    return SecretKeyRef(namespace, name, key, label)


def is_key_reference(text: Any) -> bool:
    """Whether a key string is a Secret reference (``k8s://...``) rather than key text."""
    return isinstance(text, str) and text.strip().startswith(KEY_REFERENCE)


def parse_key_reference(text: str, where: str, label: str | None = None) -> SecretKeyRef:
    """``k8s://NAMESPACE/NAME`` (cosign's form: exactly two parts, the namespace required)."""
    parts = text.strip().removeprefix(KEY_REFERENCE).split("/")
    if len(parts) != 2:
        raise PolicyError(f"{where}: expected {KEY_REFERENCE}NAMESPACE/NAME, got {text[:80]!r}")
    return _checked(parts[0], parts[1], DEFAULT_KEY, where, label)


def secret_ref_from_dict(data: Any, where: str, label: str | None = None) -> SecretKeyRef:
    """``{namespace, name, key}`` (``key`` optional: ``cosign.pub``), as ``secretRef`` and Kyverno's ``secret``."""
    data = check_fields(data, where, ("namespace", "name", "key"))
    for required in ("namespace", "name"):
        if required not in data:
            raise PolicyError(f"{where}.{required}: required (a key Secret is named by namespace and name)")
    return _checked(
        read_str(data["namespace"], f"{where}.namespace"),
        read_str(data["name"], f"{where}.name"),
        read_str(data.get("key", DEFAULT_KEY), f"{where}.key"),
        where,
        label,
    )


def check_allowed(ref: SecretKeyRef, bounds: Bounds, where: str) -> None:
    """Refuse a Secret in a namespace the operator does not let policies read keys from.

    Decided on the reference alone, before the cluster is asked: one message whatever the namespace
    holds, so the answer says nothing about what exists there.
    """
    if bounds.allows_key_secret(ref.namespace):
        return
    raise PolicyError(
        f"{where}: policies may not read key Secrets in namespace {ref.namespace!r} ({KEY_REFERENCE}{ref.namespace}/"
        f"{ref.name}); they may read only the namespaces the operator lists (MANIFEST_PROVIDER_KEY_SECRET_NAMESPACES, "
        "none by default)"
    )


class KeySecretReader(Protocol):
    """Reads one value of one Secret: the text of ``data[key]`` of Secret ``namespace/name``.

    Raises :class:`~provider.errors.PolicyError` when the value is not there to use (no such
    Secret, no such key, not readable by the service, too large, not text) -- one message naming
    the reference, whichever it was -- and :class:`~provider.errors.TransientError` when the
    cluster could not be asked by ``deadline`` (a :func:`time.monotonic` instant).
    """

    def read_key(self, namespace: str, name: str, key: str, deadline: float) -> str: ...


def _without_the_values_words(message: str) -> str:
    """A key loader's ``message`` without what a parser said of the value: the text after ``": "`` or ``" ("``.

    The loaders append the parser's own words that way (``PEM block 'PUBLIC KEY' could not be read:
    <cryptography's error>``, ``the OpenPGP key does not parse (Malformed CTB: MSB of ptag (0b01001000)
    ...)``), and those are read off the value -- one byte's bits, a length, an offset. What remains says
    what the value is (not a key, a private key, an unsupported key type), which is all the writer of a
    denied object may learn of a Secret.
    """
    cuts = [i for i in (message.find(": "), message.find(" (")) if i >= 0]
    return message[: min(cuts)] if cuts else message


def load_secret_key(ref: SecretKeyRef, text: str, max_keys: int) -> PublicKey | OpenPGPKey:
    """The one key a Secret's value holds, judged as an inline key is (module docstring).

    A value that is not one usable key is refused naming the reference and what the value is, never
    with a parser's words about it (:func:`_without_the_values_words`): the denial goes back to
    whoever wrote the object, and the Secret is not theirs to read.
    """
    try:
        keys = load_trusted_keys(text, ref.label, max_keys)
    except PolicyError as exc:
        raise PolicyError(
            f"the key Secret {ref}: {_without_the_values_words(exc.message)} (check the value with "
            "`manifest-provider verify -k` on a copy of it)"
        ) from None
    if len(keys) != 1:
        raise PolicyError(
            f"the key Secret {ref} holds {len(keys)} keys; a Secret-held key entry is one key (list one entry per "
            "Secret)"
        )
    key = keys[0]
    assert isinstance(key, PublicKey) or is_openpgp_key(key)
    return key


__all__ = [
    "DEFAULT_KEY",
    "KEY_REFERENCE",
    "KeySecretReader",
    "SecretKeyRef",
    "check_allowed",
    "is_key_reference",
    "load_secret_key",
    "parse_key_reference",
    "secret_ref_from_dict",
]
