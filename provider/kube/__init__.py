"""The Kubernetes adapters: the only home of the ``kubernetes`` client.

``credentials``: who the service and the CLI are to the API server (the
client's own configuration, loaded one way, and the headers and TLS settings
derived from it); ``client``: the API client every other module talks to the
cluster through (bounded exchanges, discovery); ``dryrun``: server-side dry-runs
(create with ``dryRun=All``) and :func:`~provider.kube.dryrun.dry_runner_for`, the
one way the service and the CLI build a runner (a client that also dry-runs);
``tokens``: bootstrap tokens read as Secrets, through the client
:func:`~provider.kube.tokens.api_client_for` builds; ``tokenreview``:
TokenReviews for the service's bearer-token callers. The library never imports
this package; the service and the CLI do, when a cluster is configured.
"""
