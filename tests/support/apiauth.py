"""Who is calling, and may they: the kube-apiserver's authentication and authorization, for the test stand-ins.

:class:`~tests.support.fakeapi.FakeApiServer` and
:class:`~tests.support.tokenreview.TokenReviewApi` refuse what a real API
server refuses, so a client that sends no credentials, or the wrong ones,
fails against them as it would against a cluster. The rules, from
kubernetes/kubernetes (staging/src/k8s.io/apiserver and pkg/kubeapiserver,
v1.27-v1.36; unchanged in what is used here):

1. **Client certificates.** The server asks for one but lets a connection
   without one through (``pkg/server/secure_serving.go``: ``ClientAuth =
   tls.RequestClientCert`` when a client CA is set); the x509 authenticator
   verifies it against the client CA and names the user after the subject's
   CommonName, the groups after its Organizations
   (``pkg/authentication/request/x509/x509.go``, ``CommonNameUserConversion``).
   Here OpenSSL verifies in the handshake (``CERT_OPTIONAL``), so a
   certificate from another CA fails the handshake rather than getting a 401:
   refused either way. The x509 authenticator comes first in the union, so a
   valid certificate wins over a token.
2. **Bearer tokens.** ``Authorization`` is trimmed and split at spaces; the
   first part must be ``bearer`` in any case and the second non-empty, else
   the request carries no token (``pkg/authentication/request/bearertoken/bearertoken.go``).
   A token nobody knows is an error: 401, never anonymous
   (``pkg/kubeapiserver/authenticator/config.go``: ``union.NewFailOnError(authenticator,
   anonymous.NewAuthenticator(...))``, "don't consider a bad bearer token ... anonymous").
3. **No credentials.** With anonymous authentication on -- kube-apiserver's
   default, ``--anonymous-auth=true`` -- the request is ``system:anonymous``
   in group ``system:unauthenticated``; with it off, 401.
4. **Authorization (RBAC's default roles).** ``system:anonymous`` may only
   read ``/healthz``, ``/livez``, ``/readyz`` and ``/version``
   (``system:public-info-viewer``); discovery is for ``system:authenticated``
   (``system:discovery``). Any other request of an identity without a grant is
   403 Forbidden, in the authorizer's words (``pkg/endpoints/handlers/responsewriters/errors.go``:
   ``User %q cannot %s resource %q in API group %q ...``; for paths,
   ``User %q cannot %s path %q``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

ANONYMOUS = "system:anonymous"
#: Paths RBAC's system:public-info-viewer grants to everyone, system:anonymous included.
PUBLIC_PATHS = frozenset({"/healthz", "/livez", "/readyz", "/version", "/version/"})
#: Discovery: system:discovery, bound to system:authenticated.
DISCOVERY_PREFIXES = ("/api", "/apis")


class Unauthorized(Exception):
    """The request's credentials are not valid: 401."""


@dataclass(frozen=True)
class Caller:
    username: str
    groups: tuple[str, ...] = ()

    @property
    def anonymous(self) -> bool:
        return self.username == ANONYMOUS


def bearer_token(authorization: str | None) -> str | None:
    """The token of an ``Authorization`` header as the API server reads it (rule 2); None: no token."""
    value = (authorization or "").strip()
    parts = value.split(" ")
    if len(parts) < 2 or parts[0].lower() != "bearer" or not parts[1]:
        return None
    return parts[1]


def certificate_caller(peer: dict[str, Any] | None) -> Caller | None:
    """The user of a verified client certificate (``ssl.SSLSocket.getpeercert()``), or None without one (rule 1)."""
    if not peer:
        return None
    names = [entry for rdn in peer.get("subject", ()) for entry in rdn]
    common = [value for key, value in names if key == "commonName"]
    groups = tuple(value for key, value in names if key == "organizationName")
    if not common or not common[0]:
        return None  # x509.go: no CommonName, no user from this authenticator; the others may still say who
    return Caller(common[0], groups)


@dataclass
class Authentication:
    """Who calls (rules 1-3); ``tokens`` maps a bearer token to its user, and may change while serving."""

    tokens: dict[str, Caller] = field(default_factory=dict)
    anonymous: bool = True

    def caller(self, authorization: str | None, peer: dict[str, Any] | None) -> Caller:
        """The caller, or :class:`Unauthorized`."""
        user = certificate_caller(peer)
        if user is not None:
            return user
        token = bearer_token(authorization)
        if token is None:
            if not self.anonymous:
                raise Unauthorized("no credentials")
            return Caller(ANONYMOUS, ("system:unauthenticated",))
        known = self.tokens.get(token)
        if known is None:
            raise Unauthorized("invalid bearer token")
        return known


def unauthorized_status() -> dict[str, Any]:
    """The API server's 401 body."""
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": "Unauthorized",
            "reason": "Unauthorized", "code": 401}  # fmt: skip


def forbidden_status(
    caller: Caller, verb: str, resource: str, group: str, namespace: str | None, *, name: str = ""
) -> dict[str, Any]:
    """The RBAC authorizer's 403 for a resource request (``apierrors.NewForbidden`` wording)."""
    where = f'in the namespace "{namespace}"' if namespace else "at the cluster scope"
    qualified = f"{resource}.{group}" if group else resource
    named = f'{qualified} "{name}"' if name else qualified
    message = (f'{named} is forbidden: User "{caller.username}" cannot {verb} resource "{resource}" in API group '
               f'"{group}" {where}')  # fmt: skip
    details: dict[str, Any] = {
        "kind": resource,
        **({"group": group} if group else {}),
        **({"name": name} if name else {}),
    }
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message,
            "reason": "Forbidden", "details": details, "code": 403}  # fmt: skip


def forbidden_path_status(caller: Caller, verb: str, path: str) -> dict[str, Any]:
    """The RBAC authorizer's 403 for a non-resource request (discovery, /metrics...)."""
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": f'forbidden: User "{caller.username}" cannot {verb} path "{path}"', "reason": "Forbidden",
            "details": {}, "code": 403}  # fmt: skip


def allowed_without_grants(caller: Caller, path: str) -> bool:
    """What RBAC's default roles allow any caller (rule 4): public paths, and discovery once authenticated."""
    if path in PUBLIC_PATHS:
        return True
    if caller.anonymous:
        return False
    return path in DISCOVERY_PREFIXES or _is_discovery(path)


def _is_discovery(path: str) -> bool:
    parts = path.strip("/").split("/")
    # /api/v1, /apis/<group>, /apis/<group>/<version>
    return (parts[0] == "api" and len(parts) == 2) or (parts[0] == "apis" and len(parts) in (2, 3))
