"""The Kubernetes adapters: the only home of the ``kubernetes`` client.

``dryrun``: server-side dry-runs (discovery, create with ``dryRun=All``);
``tokens``: bootstrap tokens read as Secrets; ``tokenreview``: TokenReviews
for the service's bearer-token callers. The library never imports this
package; the service and the CLI do, when a cluster is configured.
"""
