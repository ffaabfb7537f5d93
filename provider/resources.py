"""Kubernetes' built-in resources: the kind each resource serves, and the kinds of subresource objects.

Admission requests and audit events name a *resource* (``deployments``) and
maybe a *subresource* (``scale``); policies name *kinds* (``Deployment``).
These tables map one to the other for what a v1.36 API server serves
(``tests/data/dryrun/discovery``); custom resources are learned from what a log or
a request shows.
"""

from __future__ import annotations

# Kubernetes' built-in resources (v1.36): "group/resource" -> kind; the core group is "".
_BUILTIN = {
    "": "pods:Pod services:Service endpoints:Endpoints configmaps:ConfigMap secrets:Secret "
    "serviceaccounts:ServiceAccount namespaces:Namespace nodes:Node persistentvolumes:PersistentVolume "
    "persistentvolumeclaims:PersistentVolumeClaim events:Event limitranges:LimitRange "
    "resourcequotas:ResourceQuota replicationcontrollers:ReplicationController podtemplates:PodTemplate "
    "bindings:Binding componentstatuses:ComponentStatus",
    "apps": "deployments:Deployment replicasets:ReplicaSet statefulsets:StatefulSet daemonsets:DaemonSet "
    "controllerrevisions:ControllerRevision",
    "batch": "jobs:Job cronjobs:CronJob",
    "autoscaling": "horizontalpodautoscalers:HorizontalPodAutoscaler",
    "policy": "poddisruptionbudgets:PodDisruptionBudget",
    "networking.k8s.io": "ingresses:Ingress ingressclasses:IngressClass networkpolicies:NetworkPolicy "
    "servicecidrs:ServiceCIDR ipaddresses:IPAddress",
    "discovery.k8s.io": "endpointslices:EndpointSlice",
    "events.k8s.io": "events:Event",
    "coordination.k8s.io": "leases:Lease leasecandidates:LeaseCandidate",
    "rbac.authorization.k8s.io": "roles:Role rolebindings:RoleBinding clusterroles:ClusterRole "
    "clusterrolebindings:ClusterRoleBinding",
    "storage.k8s.io": "storageclasses:StorageClass volumeattachments:VolumeAttachment csidrivers:CSIDriver "
    "csinodes:CSINode csistoragecapacities:CSIStorageCapacity volumeattributesclasses:VolumeAttributesClass",
    "scheduling.k8s.io": "priorityclasses:PriorityClass",
    "node.k8s.io": "runtimeclasses:RuntimeClass",
    "flowcontrol.apiserver.k8s.io": "flowschemas:FlowSchema prioritylevelconfigurations:PriorityLevelConfiguration",
    "admissionregistration.k8s.io": "validatingwebhookconfigurations:ValidatingWebhookConfiguration "
    "mutatingwebhookconfigurations:MutatingWebhookConfiguration validatingadmissionpolicies:ValidatingAdmissionPolicy "
    "validatingadmissionpolicybindings:ValidatingAdmissionPolicyBinding "
    "mutatingadmissionpolicies:MutatingAdmissionPolicy "
    "mutatingadmissionpolicybindings:MutatingAdmissionPolicyBinding",
    "apiextensions.k8s.io": "customresourcedefinitions:CustomResourceDefinition",
    "apiregistration.k8s.io": "apiservices:APIService",
    "certificates.k8s.io": "certificatesigningrequests:CertificateSigningRequest "
    "clustertrustbundles:ClusterTrustBundle",
    "resource.k8s.io": "resourceclaims:ResourceClaim resourceclaimtemplates:ResourceClaimTemplate "
    "deviceclasses:DeviceClass resourceslices:ResourceSlice",
    "authentication.k8s.io": "tokenreviews:TokenReview selfsubjectreviews:SelfSubjectReview",
    "authorization.k8s.io": "subjectaccessreviews:SubjectAccessReview selfsubjectaccessreviews:SelfSubjectAccessReview "
    "selfsubjectrulesreviews:SelfSubjectRulesReview localsubjectaccessreviews:LocalSubjectAccessReview",
}
BUILTIN_KINDS: dict[tuple[str, str], str] = {
    (group, pair.partition(":")[0]): pair.partition(":")[2]
    for group, pairs in _BUILTIN.items()
    for pair in pairs.split()
}
#: Built-in kinds served with a ``scale`` subresource (``tests/data/dryrun/discovery``): (group, kind).
SCALABLE_KINDS = frozenset(
    {("apps", "Deployment"), ("apps", "ReplicaSet"), ("apps", "StatefulSet"), ("", "ReplicationController")}
)
#: Subresources whose admission object is not the parent's kind: (group, version, kind).
SUBRESOURCE_KINDS: dict[str, tuple[str, str, str]] = {
    "scale": ("autoscaling", "v1", "Scale"),
    "binding": ("", "v1", "Binding"),
    "token": ("authentication.k8s.io", "v1", "TokenRequest"),
    "eviction": ("policy", "v1", "Eviction"),
}
