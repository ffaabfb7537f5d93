"""Comparing what was signed with what is admitted, by value.

* :mod:`~provider.compare.diff` -- the leaf-by-leaf diff and the ignore patterns;
* :mod:`~provider.compare.kindschema` -- which fields of a kind are maps, which lists are keyed;
* :mod:`~provider.compare.allocations` -- values the API server chooses (cluster IPs, node ports);
* :mod:`~provider.compare.stamps` -- metadata a deployment tool stamps, with its values;
* :mod:`~provider.compare.controlplane` -- objects the control plane writes, by content;
* :mod:`~provider.compare.dryrun` -- comparing with the cluster's server-side dry-run of the
  signed document (the :class:`~provider.compare.dryrun.DryRunner` port).
"""
