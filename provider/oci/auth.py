"""Registry credentials for bundle fetches: Docker config files and pull Secrets, each credential for its own registry.

Where they come from (each ends as a Docker config document):

* a pull Secret a policy names (``resourceBundleRef.pullSecrets``): its
  ``.dockerconfigjson`` (type ``kubernetes.io/dockerconfigjson``, ``{"auths": {...}}``)
  or ``.dockercfg`` (type ``kubernetes.io/dockercfg``, the same map without
  ``auths``: k8s.io/api core/v1 types.go ``DockerConfigJsonKey``,
  ``DockerConfigKey``), read from the cluster within the operator's
  ``MANIFEST_PROVIDER_PULL_SECRET_NAMESPACES``;
* the file the operator names (``MANIFEST_PROVIDER_REGISTRY_AUTH_FILE``, e.g. a
  mounted pull Secret), read again whenever it changes (:class:`AuthFile`).

A policy's pull Secrets are asked first, then the operator's file.

**Which registry a credential is for** is read as the Docker CLI reads its
config: an ``auths`` key is a registry host, with an ``http://`` or
``https://`` scheme and anything after the host dropped (docker/cli
``cli/config/credentials/file_store.go`` ``ConvertToHostname``: a key with
``://`` is parsed as a URL and becomes ``host[:port]``, any other key is cut at
its first ``/``), and Docker Hub's spellings (``https://index.docker.io/v1/``,
``docker.io``, ``registry-1.docker.io``) are one registry, ``index.docker.io``,
as references name it here (:class:`provider.signatures.sources.Reference`). A credential
is then offered to that host exactly -- same name, same port -- and to no
other: no wildcard (kubelet's ``*.example.com`` keys match nothing here), no
parent domain, never a redirect target (:class:`provider.oci.registry.RegistryClient`
sends credentials to the registry's own scheme, host and port only, and to a
token realm only where the operator lets the registry send the service). Two keys
naming one registry with different credentials are refused: which one Docker
would use depends on a map's order.

An entry's credentials are ``auth`` (base64 of ``user:password``, the password
being everything after the first ``:``) or ``username`` and ``password``.
``identitytoken`` and ``registrytoken`` (OAuth refresh and bearer tokens) and
``credsStore``/``credHelpers`` (programs to run) are not used: an entry with
only those is left out, and the fetch goes anonymous.

Nothing here logs or quotes a credential: errors name the key and the field.
"""

from __future__ import annotations

import base64
import binascii
import os
import stat
import threading
import urllib.parse
from dataclasses import dataclass
from typing import Any

from ..errors import PolicyError
from ..parsing import load_json
from ..signatures.sources import DEFAULT_REGISTRY

#: Bytes of one Docker config (a pull Secret's value is at most 1 MiB; a config with a few registries a few KiB).
MAX_CONFIG_BYTES = 256 * 1024
#: Registries one config may name.
MAX_REGISTRIES = 256
#: Docker Hub's spellings (docker/cli: ``https://index.docker.io/v1/`` is the key ``docker login`` writes for it).
_DOCKER_HUB = frozenset({"index.docker.io", "docker.io", "registry-1.docker.io"})


class AuthError(PolicyError):
    """A Docker config that cannot be read (``policy-invalid`` when a policy named it)."""

    reason = "policy-invalid"


def registry_of(key: str) -> str:
    """The registry (``host[:port]``, lower case) an ``auths`` key is for (module docstring)."""
    text = key.strip()
    if "://" in text:
        try:
            parts = urllib.parse.urlsplit(text)
            host, port = parts.hostname, parts.port
        except ValueError:
            host, port = None, None
        if host:
            shown = f"[{host}]" if ":" in host else host
            text = f"{shown}:{port}" if port else shown
        else:
            text = text.split("://", 1)[1]
    host = text.split("/", 1)[0].lower()
    return DEFAULT_REGISTRY if host in _DOCKER_HUB else host


@dataclass(frozen=True)
class Credential:
    """A user name and password for one registry; shown as the user name only."""

    username: str
    password: str

    def __repr__(self) -> str:
        return f"Credential({self.username!r}, ***)"

    def pair(self) -> tuple[str, str]:
        return self.username, self.password


def _entry(value: Any, where: str) -> Credential | None:
    if not isinstance(value, dict):
        raise AuthError(f"{where}: not a mapping")
    auth = value.get("auth")
    if isinstance(auth, str) and auth:
        try:
            decoded = base64.b64decode(auth, validate=True).decode("utf-8")
        except (binascii.Error, ValueError):
            raise AuthError(f"{where}.auth: not base64 of user:password") from None
        user, sep, password = decoded.partition(":")
        if not sep or not user:
            raise AuthError(f"{where}.auth: not base64 of user:password")
        return Credential(user, password.strip("\x00"))
    name, secret = value.get("username"), value.get("password")
    if isinstance(name, str) and name and isinstance(secret, str):
        return Credential(name, secret)
    return None  # identitytoken / registrytoken only: not used (module docstring)


def parse_docker_config(text: str | bytes, where: str) -> dict[str, Credential]:
    """Registry -> credential from a ``.dockerconfigjson`` (``{"auths": ...}``) or ``.dockercfg`` document."""
    data = text.encode() if isinstance(text, str) else text
    if len(data) > MAX_CONFIG_BYTES:
        raise AuthError(f"{where}: larger than {MAX_CONFIG_BYTES} bytes")
    try:
        document = load_json(data, error=AuthError, what=where)
    except AuthError:
        # Not json's own words: they say where the value stops parsing (a password's leading digits), and
        # the value may be a Secret the reader of the denial may not read.
        raise AuthError(f"{where} is not a JSON document (a Docker config is one)") from None
    if not isinstance(document, dict):
        raise AuthError(f"{where}: not a JSON object")
    auths = document.get("auths", document)
    if not isinstance(auths, dict):
        raise AuthError(f"{where}.auths: not a mapping")
    if len(auths) > MAX_REGISTRIES:
        raise AuthError(f"{where}: more than {MAX_REGISTRIES} registries")
    found: dict[str, Credential] = {}
    for key, value in auths.items():
        if key in ("credsStore", "credHelpers", "HttpHeaders", "psFormat", "detachKeys"):
            continue  # a config.json's other fields, beside a legacy top-level map
        spot = f"{where}.auths[{str(key)[:80]!r}]"
        credential = _entry(value, spot)
        if credential is None:
            continue
        registry = registry_of(str(key))
        if registry in found and found[registry] != credential:
            raise AuthError(f"{spot}: a second, different credential for {registry}; which one applies is ambiguous")
        found[registry] = credential
    return found


class AuthFile:
    """The operator's Docker config file, read again when it changes (a mounted Secret is replaced, not edited).

    Read with the care of a file the service did not write: a regular file only (never a FIFO or a
    device), at most :data:`MAX_CONFIG_BYTES`. A file that is missing or unreadable gives no credentials
    (the fetch goes anonymous and the registry decides); one that does not parse raises :class:`AuthError`.
    """

    def __init__(self, path: str) -> None:
        self.path = path
        self._seen: tuple[int, int, int, int] | None = None
        self._credentials: dict[str, Credential] = {}
        self._error: AuthError | None = None
        self._lock = threading.Lock()

    def credentials(self) -> dict[str, Credential]:
        try:
            info = os.stat(self.path)
        except OSError:
            return {}
        if not stat.S_ISREG(info.st_mode):
            return {}
        seen = (info.st_dev, info.st_ino, info.st_mtime_ns, info.st_size)
        with self._lock:
            if seen != self._seen:
                self._seen = seen
                try:
                    if info.st_size > MAX_CONFIG_BYTES:
                        raise AuthError(f"the registry auth file {self.path}: larger than {MAX_CONFIG_BYTES} bytes")
                    with open(self.path, "rb") as handle:
                        data = handle.read(MAX_CONFIG_BYTES + 1)
                    found = parse_docker_config(data, f"the registry auth file {self.path}")
                    self._credentials, self._error = found, None
                except AuthError as exc:
                    self._credentials, self._error = {}, exc
                except OSError:
                    self._credentials, self._error = {}, None
            if self._error is not None:
                raise self._error
            return self._credentials
