"""Values the API server chooses where the signer left the choice to it.

A signed Service without ``clusterIP`` gets an address from the service range;
a ``NodePort`` without ``nodePort`` gets a port; a DaemonSet gets the
``deprecated.daemonset.template.generation`` annotation, restating its
``metadata.generation``; an OpenShift ``Route`` without ``spec.host`` gets a
generated host name (the route API: "If not specified a route name will
typically be automatically chosen"). None of these can be in a signed manifest (they do not
exist until the object does), so neither the direct comparison nor the dry-run
comparison could ever verify such objects if they were compared as they are.

:func:`adopt_server_choices` copies such a value from the admitted object into
the reference it is compared with -- and only under three conditions, so that
no mask is wider than its reason (``docs/dryrun.md``, ``docs/policy.md``):

* the object is of the kind the server allocates for (core ``Service``,
  ``apps`` ``DaemonSet``, ``route.openshift.io`` ``Route``), never any kind;
* the signed manifest left the field empty: a signer's ``clusterIP: None``
  (headless), a chosen ``nodePort`` or a chosen Route ``host`` is compared as it is;
* the admitted value has the shape the server gives it: an IP address, a port
  number, the object's own generation as a string, a DNS name. Anything else is compared.

With ``allocated_in_reference`` (the dry-run path) the reference must show an
allocation of its own too: the server allocated the field for the signed
manifest, so it is one the server chooses for this object.
"""

from __future__ import annotations

import copy
import ipaddress
from typing import Any

from ..objects import split_api_version
from ..readers import child_list, child_mapping
from .stamps import is_dns_subdomain

_SERVICE = ("", "Service")
_DAEMONSET = ("apps", "DaemonSet")
_ROUTE = ("route.openshift.io", "Route")
#: The DaemonSet registry strategy's annotation (kubernetes pkg/registry/apps/daemonset): the template generation.
DAEMONSET_GENERATION = "deprecated.daemonset.template.generation"


def _is_ip(value: Any) -> bool:
    if not isinstance(value, str):
        return False
    try:
        ipaddress.ip_address(value)
    except ValueError:
        return False
    return True


def _is_port(value: Any) -> bool:
    return type(value) is int and 0 < value < 65536


def kind_of(obj: dict[str, Any]) -> tuple[str, Any]:
    return split_api_version(obj.get("apiVersion"))[0], obj.get("kind")


def chooses(signed: dict[str, Any]) -> bool:
    """Whether the server chooses any value for objects of this kind (else nothing is adopted, nothing copied)."""
    return kind_of(signed) in (_SERVICE, _DAEMONSET, _ROUTE)


def adopt_server_choices(
    reference: dict[str, Any], admitted: dict[str, Any], signed: dict[str, Any], *, allocated_in_reference: bool
) -> None:
    """Copy into ``reference`` (in place) what the server chose for ``admitted`` where ``signed`` left it open."""
    kind = kind_of(signed)
    if kind == _SERVICE:
        _adopt_service(reference, admitted, signed, allocated_in_reference)
    elif kind == _DAEMONSET:
        _adopt_daemonset_generation(reference, admitted, signed)
    elif kind == _ROUTE:
        _adopt_route_host(reference, admitted, signed, allocated_in_reference)


def with_server_choices(signed: dict[str, Any], admitted: dict[str, Any]) -> dict[str, Any]:
    """The signed document as the reference of a direct comparison, the server's choices adopted (then a copy)."""
    if not chooses(signed):
        return signed
    reference = copy.deepcopy(signed)
    adopt_server_choices(reference, admitted, signed, allocated_in_reference=False)
    return reference


def _adopt_service(
    reference: dict[str, Any], admitted: dict[str, Any], signed: dict[str, Any], in_reference: bool
) -> None:
    ref_spec, adm, sig = (
        reference.setdefault("spec", {}),
        child_mapping(admitted, "spec"),
        child_mapping(signed, "spec"),
    )
    if not isinstance(ref_spec, dict):
        return

    def allocated(ref_value: Any, check: Any) -> bool:
        return not in_reference or check(ref_value)

    if not sig.get("clusterIP") and allocated(ref_spec.get("clusterIP"), _is_ip) and _is_ip(adm.get("clusterIP")):
        ref_spec["clusterIP"] = adm["clusterIP"]
    adm_ips, sig_ips = child_list(adm, "clusterIPs"), child_list(sig, "clusterIPs")
    ref_ips = child_list(ref_spec, "clusterIPs") if in_reference else list(sig_ips)
    for i, adm_ip in enumerate(adm_ips):
        chosen = (i < len(sig_ips) and sig_ips[i]) or (i == 0 and sig.get("clusterIP"))
        if chosen or not _is_ip(adm_ip) or (in_reference and not (i < len(ref_ips) and _is_ip(ref_ips[i]))):
            continue
        if i < len(ref_ips):
            ref_ips[i] = adm_ip
        elif i == len(ref_ips):
            ref_ips.append(adm_ip)
    if ref_ips and not in_reference:
        ref_spec["clusterIPs"] = ref_ips
    if (
        not sig.get("healthCheckNodePort")
        and allocated(ref_spec.get("healthCheckNodePort"), _is_port)
        and _is_port(adm.get("healthCheckNodePort"))
    ):
        ref_spec["healthCheckNodePort"] = adm["healthCheckNodePort"]
    sig_ports = child_list(sig, "ports")
    for i, (ref_port, adm_port) in enumerate(
        zip(child_list(ref_spec, "ports"), child_list(adm, "ports"), strict=False)
    ):
        sig_port = sig_ports[i] if i < len(sig_ports) and isinstance(sig_ports[i], dict) else {}
        if not isinstance(ref_port, dict) or not isinstance(adm_port, dict) or sig_port.get("nodePort"):
            continue
        if allocated(ref_port.get("nodePort"), _is_port) and _is_port(adm_port.get("nodePort")):
            ref_port["nodePort"] = adm_port["nodePort"]


def _adopt_daemonset_generation(reference: dict[str, Any], admitted: dict[str, Any], signed: dict[str, Any]) -> None:
    if DAEMONSET_GENERATION in child_mapping(child_mapping(signed, "metadata"), "annotations"):
        return
    adm_meta = child_mapping(admitted, "metadata")
    value, generation = child_mapping(adm_meta, "annotations").get(DAEMONSET_GENERATION), adm_meta.get("generation")
    if type(generation) is not int or value != str(generation):
        return
    meta = reference.setdefault("metadata", {})
    if isinstance(meta, dict):
        annotations = meta.get("annotations")
        meta["annotations"] = {**(annotations if isinstance(annotations, dict) else {}), DAEMONSET_GENERATION: value}


def _adopt_route_host(
    reference: dict[str, Any], admitted: dict[str, Any], signed: dict[str, Any], in_reference: bool
) -> None:
    """A generated route host, only where the signer named none: a signed host is who receives the traffic.

    Generated means the allocator's shape, ``<name>-<namespace>.<router suffix>``
    (openshift/origin pkg/route/allocation/simple ``GenerateHostname``): any other name
    would claim a host -- and its traffic -- the signer never chose.
    """
    if child_mapping(signed, "spec").get("host"):
        return
    ref_spec, host = reference.setdefault("spec", {}), child_mapping(admitted, "spec").get("host")
    meta = child_mapping(admitted, "metadata")
    prefix = f"{meta.get('name')}-{meta.get('namespace')}."
    generated = isinstance(host, str) and is_dns_subdomain(host) and host.startswith(prefix) and len(host) > len(prefix)
    if isinstance(ref_spec, dict) and generated and (not in_reference or is_dns_subdomain(ref_spec.get("host"))):
        ref_spec["host"] = host


#: The garbage collector's finalizers (k8s.io/apimachinery ``metav1.FinalizerOrphanDependents`` and
#: ``FinalizerDeleteDependents``). The API server adds them to an object only as part of a DELETE
#: (``propagationPolicy: Orphan`` / ``Foreground``), together with ``deletionTimestamp``.
GC_FINALIZERS = frozenset({"orphan", "foregroundDeletion"})


def deletion_finalizers_added(signed: dict[str, Any], admitted: dict[str, Any]) -> list[Any]:
    """The garbage collector's finalizers ``admitted`` carries, ``signed`` does not, outside a deletion.

    Upstream's default profile ignores ``metadata.finalizers`` (controllers add their
    own), which also hid these two: an ``orphan`` added by an UPDATE makes a later
    ``kubectl delete`` of a signed Deployment leave its pods running (the API server
    keeps an object's existing orphan finalizer when a DELETE names no policy). Only a
    DELETE puts them there legitimately, so on an object that is not being deleted
    they are a difference whatever the ignore patterns say.

    ``metadata.finalizers`` that is not a list (the API server stores none such; a file
    or a library caller's object may hold one) is returned whole: it cannot be read as
    free of these two, and an ignore pattern must not hide it.
    """
    meta = child_mapping(admitted, "metadata")
    if meta.get("deletionTimestamp") is not None:
        return []
    found = meta.get("finalizers")
    if found is not None and not isinstance(found, list):
        return [found]
    wanted = child_list(child_mapping(signed, "metadata"), "finalizers")
    return [f for f in child_list(meta, "finalizers") if f in GC_FINALIZERS and f not in wanted]
