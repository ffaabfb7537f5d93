"""Size limits for everything an attacker can put in front of the verifier.

One frozen dataclass holds every limit, with documented defaults. Every limit
hit is reported as ``malformed-message`` (for the signature envelope) or
``request-invalid`` (for the request), in bounded time and memory: decoders
check a limit *before* doing the work it bounds (a gzip bomb is refused after
inflating at most ``max_payload_bytes``, never all of it).

The defaults are generous for real manifests (the largest objects Kubernetes
stores are bounded by etcd's 1.5 MiB request limit) and small enough that one
request cannot exhaust a worker.
"""

from __future__ import annotations

from dataclasses import dataclass

KIB = 1024
MIB = 1024 * KIB

#: The most ``Limits.max_depth`` may be. Two dependencies refuse deeper input on their own,
#: in their own words: libyaml (0.2.6 and later) past 1000 levels, and Python's json module
#: at the interpreter's recursion limit (1000 frames, the caller's own stack included).
#: Below this ceiling our check refuses first wherever it sees the input, and whatever a
#: dependency refuses first is deeper than ``max_depth``, so :mod:`provider.parsing` can
#: answer with our reason and message whichever of them trips.
MAX_DEPTH_CEILING = 500


@dataclass(frozen=True)
class Limits:
    #: Bytes of the base64 ``message`` annotation. Kubernetes caps all
    #: annotations of one object at 256 KiB (apimachinery TotalAnnotationSizeLimitB).
    max_message_bytes: int = 256 * KIB
    #: Bytes after gunzip (payload P), and again after the inner tar.gz is
    #: inflated. A gzip bomb stops here.
    max_payload_bytes: int = 4 * MIB
    #: Members read from a tarball message (directories included).
    max_tar_members: int = 512
    #: YAML documents in one payload.
    max_documents: int = 1000
    #: YAML/JSON nodes in one parse, counting each alias as the full size of
    #: what it refers to (so a "billion laughs" stops here).
    max_nodes: int = 200_000
    #: Nesting depth of mappings and sequences.
    max_depth: int = 100
    #: ``signature``/``signature_N`` annotations on one object.
    max_signatures: int = 64
    #: Decoded bytes of one signature (RSA-8192 is 1024 bytes).
    max_signature_bytes: int = 2048
    #: ``jws-kubeconfig-<token-id>`` keys in one ``cluster-info`` ConfigMap: the
    #: bootstrap signer writes one per live signing token (kubeadm clusters hold
    #: a handful); each costs one token lookup.
    max_jws_signatures: int = 32
    #: Characters of one detached JWS value. The bootstrap signer's is 85
    #: (a 40-character protected header, ``..``, a 43-character HS256 MAC).
    max_jws_chars: int = 512
    #: Decoded bytes of a CertificateSigningRequest's ``spec.request`` (PEM). A
    #: kubelet's ECDSA P-256 request is ~600 bytes, an RSA-4096 one ~2 KiB.
    max_csr_bytes: int = 64 * KIB
    #: Decoded bytes of one certificate or bundle annotation (after gunzip).
    max_certificate_bytes: int = 64 * KIB
    #: Keys plus signer entries in one policy.
    max_keys: int = 64
    #: Certificates in one ``certificate[_N]`` annotation (the signer's leaf plus
    #: the intermediates it brings), and the most intermediates a path from a
    #: leaf to a trusted root may pass (cryptography's ``max_chain_depth``).
    #: Fulcio paths have one intermediate; enterprise PKIs rarely exceed three.
    max_chain_certificates: int = 5
    #: Bytes of one sigstore TrustedRoot document (the public-good root is ~6 KiB).
    max_trusted_root_bytes: int = 1 * MIB
    #: CA certificates in one signer's ``roots`` or one TrustedRoot.
    max_root_certificates: int = 64
    #: Difference items reported in a result (the count is always exact).
    max_diff_items: int = 50
    #: Field patterns one policy names (``ignoreFields`` and ``sensitiveFields`` patterns, ``skipUsers``
    #: entries' ``fields``; the built-in profiles' are not counted). Each is tried at every position of
    #: every object it may apply to, and a ``skipUsers`` entry's fields diff the whole object, so a
    #: policy's patterns multiply what one verification costs; real policies name tens.
    max_field_patterns: int = 128
    #: ``skipUsers`` entries with ``fields`` in one policy: each one that matches the requester diffs
    #: the whole object against its old version, so they multiply an UPDATE's cost by their number;
    #: real policies name a handful (a controller, an autoscaler).
    max_field_rules: int = 16
    #: Characters of a value quoted in a human message.
    max_quoted_value: int = 80
    #: Bytes of one Kubernetes API response the dry-run client reads (a
    #: created object, a discovery document). Objects are capped by etcd's
    #: 1.5 MiB request limit; managedFields can roughly double that.
    max_api_response_bytes: int = 8 * MIB
    #: Seconds one server-side dry-run may take in total (discovery, the
    #: create, one retry after a name clash); past it the verdict is
    #: ``dry-run-failed``. It must fit well inside the admission webhook's own
    #: timeout, which also covers the rest of the verification.
    dry_run_timeout: float = 1.5
    #: Seconds one resource-bundle fetch may take in total (resolving the tag, the
    #: manifest, the layer, the signature manifest and its layers), whatever the
    #: policy's ``resourceBundleRef.timeoutSeconds`` asks: past it the verdict is
    #: ``bundle-unavailable``. It sits inside the webhook's deadline like the dry-run's.
    bundle_timeout: float = 1.0
    #: Bytes of one registry manifest read. An image or ``.sig`` manifest is well
    #: under 2 KiB; the OCI distribution spec lets registries refuse more than 4 MiB.
    max_registry_manifest_bytes: int = 64 * KIB
    #: Bytes of one audit-log line (one ``audit.k8s.io/v1`` Event). An event at
    #: level RequestResponse holds a request body (the API server accepts up to
    #: 3 MiB, apiserver ``MaxRequestBodyBytes``) and a stored object (etcd's
    #: default 1.5 MiB request limit), JSON-escaped; longer lines are counted
    #: as malformed and skipped without being held in memory.
    max_audit_line_bytes: int = 8 * MIB
    #: Bytes of one HTTP request body to the service (413 beyond). A key carries
    #: the whole object (etcd stores at most 1.5 MiB), so 16 MiB holds a batch of
    #: ten of the largest objects or hundreds of ordinary ones.
    max_body_bytes: int = 16 * MIB
    #: Keys in one Gatekeeper ProviderRequest. Gatekeeper sends one key per
    #: object a template asks about; 128 leaves room for batched templates.
    max_keys_per_request: int = 128
    #: Characters of the CA bundle a control-plane ConfigMap holds
    #: (``kube-root-ca.crt``'s ``ca.crt``, ``openshift-service-ca.crt``'s
    #: ``service-ca.crt``; :mod:`provider.compare.controlplane`). A kubeadm cluster's is
    #: one certificate of ~1.1 KiB, an OpenShift cluster's a handful; a longer
    #: bundle is not taken for the control plane's and is listed.
    max_ca_bundle_chars: int = 128 * KIB

    def __post_init__(self) -> None:
        if not 1 <= self.max_depth <= MAX_DEPTH_CEILING:
            raise ValueError(
                f"max_depth must be between 1 and {MAX_DEPTH_CEILING}, got {self.max_depth}: deeper input is "
                "refused by libyaml and Python's json module themselves"
            )


DEFAULT_LIMITS = Limits()
