"""Adapter: OCI registries (resource bundles for :mod:`provider.signatures.sources`), the only home of registry I/O.

:class:`~provider.oci.bundles.OciBundleSource` is the verifier's
:class:`~provider.signatures.sources.BundleSource`; :mod:`provider.oci.registry` is the
HTTP client under it. Layered beside ``kube`` and ``audit``: the library
never imports it (``setup.cfg`` ``[importlinter]``), the faces build it.
"""
