"""The policies the service holds, and how they decide an admission request without an engine.

The service can be its own admission webhook (``POST /v1/admission/validate``,
:mod:`provider.service.wire.admission`): then the policy does not travel in the
request, it is held by the service, chosen by what is admitted. Two kinds hold
it (``docs/policy.md``, "Cluster and tenant policies"):

* ``ClusterManifestPolicy`` -- cluster-scoped, the operator's;
* ``ManifestPolicy`` -- namespaced, a tenant's: it applies in its own
  namespace only, and can only add requirements.

Modules:

* :mod:`~provider.policystore.objects` -- the kinds, read into :class:`HeldPolicy`
  (compiled, or held with its error), and the ``status`` the service writes;
* :mod:`~provider.policystore.match` -- what a policy matches (kinds, namespaces, labels);
* :mod:`~provider.policystore.combine` -- :func:`admit`: which policies apply and
  how their verdicts make one answer;
* :mod:`~provider.policystore.store` -- :class:`PolicyStore`, what is held now and
  whether the service may decide yet;
* :mod:`~provider.policystore.files` -- the static mode, policies from files
  reloaded on change.

This package is library code: no web framework, no Kubernetes client. The
watch of the policy objects and their status writes are the service's
(:mod:`provider.service.heldpolicies`), built on :mod:`provider.kube.watcher`.
"""

from .combine import Admission, PolicyVerdict, admit, check_policy_object
from .objects import (
    API_GROUP,
    API_VERSION,
    CLUSTER_KIND,
    KINDS,
    NAMESPACED_KIND,
    HeldPolicy,
    read_policy_object,
    status_for,
)
from .store import PolicySet, PolicyStore

__all__ = [
    "API_GROUP",
    "API_VERSION",
    "CLUSTER_KIND",
    "KINDS",
    "NAMESPACED_KIND",
    "Admission",
    "HeldPolicy",
    "PolicySet",
    "PolicyStore",
    "PolicyVerdict",
    "admit",
    "check_policy_object",
    "read_policy_object",
    "status_for",
]
