"""Who the service and the CLI are to the API server: the ``kubernetes`` client's own configuration, loaded one way.

Every request this package makes to a cluster authenticates with what the
``kubernetes`` client (37.x) loaded, never with fields read out of it by
hand: dry-runs, discovery, lists, writes and ConfigMap reads go through its
``ApiClient`` (:mod:`provider.kube.client`), bootstrap-token Secrets through
its ``CoreV1Api`` (:mod:`provider.kube.tokens`), and the one exchange made
outside it, the TokenReview (:mod:`provider.kube.tokenreview`), takes its
headers from :func:`auth_headers` and its TLS settings from
:func:`tls_context`, both read through the ``Configuration``'s public API.

What the client keeps where (``kubernetes/config/kube_config.py`` and
``kubernetes/config/incluster_config.py`` of kubernetes-client/python 37.x):

* a kubeconfig ``token`` or ``tokenFile``, an ``exec`` plugin's token, an
  ``auth-provider``'s (``oidc``; ``gcp`` with ``cmd-path`` or google-auth) and
  ``username``/``password`` (as a ``Basic`` value) all end up in
  ``Configuration.api_key["BearerToken"]``, prefix included (``KubeConfigLoader._set_config``),
  with a ``refresh_api_key_hook`` that loads them again once an ``expiry`` has passed;
* the pod's service-account token likewise (``"bearer " + file``), with a hook
  that rereads the file a minute after the last read (``InClusterConfigLoader``:
  the kubelet rotates the projected token in place);
* client certificates as ``cert_file``/``key_file`` (a kubeconfig's ``-data``
  fields and an exec plugin's ``clientCertificateData`` written to temporary
  files); the CA as ``ssl_ca_cert``.

``Configuration.auth_settings()`` is the client's own way to turn that into a
header: it calls the refresh hook first and looks the key up under
``BearerToken`` (alias ``authorization``) -- what every generated API method
asks for (``auth_settings=['BearerToken']``). Asking
``get_api_key_with_prefix("authorization")`` instead finds nothing: that is
how TokenReviews once went out without credentials.

In a pod the token, CA and namespace are read from
:data:`SERVICE_ACCOUNT_DIR`, or from the directory the operator names (a
projected token mounted elsewhere, ``automountServiceAccountToken: false``):
the client's ``InClusterConfigLoader`` takes the file names.
"""

from __future__ import annotations

import os
import ssl
from dataclasses import dataclass
from typing import Any

from ..errors import ConfigError, TransientError

#: Where the kubelet mounts a pod's service-account token, CA and namespace.
SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
#: The security scheme the client's generated API methods name (``CoreV1Api``: ``_auth_settings = ['BearerToken']``).
AUTH_SETTINGS = ("BearerToken",)


@dataclass(frozen=True)
class Identity:
    """A loaded client ``Configuration``, what to call its cluster in messages, and its default namespace."""

    configuration: Any
    source: str
    namespace: str


def kubeconfig_files(path: str | None) -> str:
    """The kubeconfig ``path`` names, else ``$KUBECONFIG``, else ``~/.kube/config`` (as kubectl finds it)."""
    return path or os.environ.get("KUBECONFIG") or os.path.expanduser("~/.kube/config")


def from_kubeconfig(path: str | None = None, *, context: str | None = None) -> Identity:
    """The identity of a kubeconfig's context (None: the current one); :class:`ConfigError` naming the file."""
    import yaml
    from kubernetes import client, config
    from kubernetes.config.config_exception import ConfigException

    files = kubeconfig_files(path)
    configuration = client.Configuration()
    try:
        config.load_kube_config(  # type: ignore[no-untyped-call]
            config_file=files, context=context, client_configuration=configuration, persist_config=False
        )
        contexts, active = config.list_kube_config_contexts(config_file=files)  # type: ignore[no-untyped-call]
    except (ConfigException, yaml.YAMLError, OSError, ValueError, TypeError, KeyError, AttributeError) as exc:
        raise ConfigError(f"kubeconfig {files}: {str(exc)[:300] or type(exc).__name__}") from exc
    chosen = next((c for c in contexts or [] if c.get("name") == context), active) if context else active
    namespace = ((chosen or {}).get("context") or {}).get("namespace") or "default"
    label = f"the cluster of kubeconfig {files} (context {(chosen or {}).get('name', '?')})"
    return Identity(configuration, label, namespace)


def in_cluster(service_account_dir: str | None = None) -> Identity:
    """The pod's own identity: ``KUBERNETES_SERVICE_HOST``/``_PORT`` and the service-account files.

    The token is reread by the client as it rotates (module docstring).
    :class:`ConfigError` outside a pod or without the files.
    """
    from kubernetes import client
    from kubernetes.config.config_exception import ConfigException
    from kubernetes.config.incluster_config import InClusterConfigLoader

    directory = service_account_dir or SERVICE_ACCOUNT_DIR
    configuration = client.Configuration()
    loader = InClusterConfigLoader(  # type: ignore[no-untyped-call]
        token_filename=os.path.join(directory, "token"), cert_filename=os.path.join(directory, "ca.crt")
    )
    try:
        loader.load_and_set(configuration)  # type: ignore[no-untyped-call]
    except (ConfigException, OSError) as exc:
        raise ConfigError(f"in-cluster configuration ({directory}): {str(exc)[:300] or type(exc).__name__}") from exc
    try:
        with open(os.path.join(directory, "namespace"), encoding="utf-8") as handle:
            namespace = handle.read().strip() or "default"
    except OSError:
        namespace = "default"
    return Identity(configuration, "the API server (in-cluster)", namespace)


def cluster_identity(kubeconfig: str | None, service_account_dir: str | None = None) -> Identity | None:
    """The service's rule: ``kubeconfig`` when given, else the pod's identity inside a pod, else ``None``."""
    if kubeconfig:
        return from_kubeconfig(kubeconfig)
    if os.environ.get("KUBERNETES_SERVICE_HOST"):
        return in_cluster(service_account_dir)
    return None


def auth_headers(configuration: Any) -> dict[str, str]:
    """The authentication headers the client itself would send now (its refresh hook runs first).

    Empty when the identity is a client certificate alone (it travels in the TLS handshake).
    """
    headers: dict[str, str] = {}
    try:
        settings = configuration.auth_settings()
    except Exception as exc:  # the refresh hook: a token file gone or empty, an expired exec token's plugin failing
        # The type only: the client's messages can quote a plugin's output.
        raise TransientError(f"the cluster credentials could not be refreshed ({type(exc).__name__})") from exc
    for name in AUTH_SETTINGS:
        setting = settings.get(name)
        if setting and setting.get("in") == "header" and setting.get("value"):
            headers[str(setting["key"])] = str(setting["value"])
    return headers


def tls_context(configuration: Any) -> ssl.SSLContext:
    """A client TLS context with the client's settings: its CA, client certificate, and verification switch.

    Built from the files as they are now, so a rotated CA or client
    certificate is read anew by every caller that builds one.
    """
    cadata = getattr(configuration, "ca_cert_data", None)
    context = ssl.create_default_context(cafile=configuration.ssl_ca_cert or None, cadata=cadata or None)
    if configuration.cert_file:
        context.load_cert_chain(configuration.cert_file, configuration.key_file or None)
    if not configuration.verify_ssl:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    elif getattr(configuration, "assert_hostname", None) is False:
        context.check_hostname = False  # urllib3's meaning of assert_hostname=False: the chain, not the name
    return context


def server_name(configuration: Any, host: str) -> str:
    """The name the server's certificate must carry: the kubeconfig's ``tls-server-name``, else the host."""
    return str(getattr(configuration, "tls_server_name", None) or host)
