"""The neighbouring trust checks the service also runs (``docs/neighbours.md``).

``bootstrap``: a ``cluster-info`` ConfigMap signed with bootstrap tokens (JWS);
``csr``: kubelet-serving CertificateSigningRequests.
"""
