"""Signatures: the k8s-manifest-sigstore format, where signatures are kept, and making them.

* :mod:`~provider.signatures.envelope` -- the ``cosign.sigstore.dev/*`` annotations, read and
  written: the gzipped message, ``signature[_N]``, ``certificate[_N]``, ``bundle[_N]``;
* :mod:`~provider.signatures.sources` -- signatures kept outside the object (an OCI resource
  bundle, a signature ConfigMap): what a policy names and how the sets are merged;
* :mod:`~provider.signatures.signing` -- signing manifests in the same format.
"""
