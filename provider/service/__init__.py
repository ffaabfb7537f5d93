"""The HTTPS service Gatekeeper and Kyverno call (``docs/api.md``).

``app``: the Flask app factory and the authentication hooks; ``routes``: one
blueprint per route family (Gatekeeper, Kyverno, probes and metrics), each
with its one error ladder; ``body``: reading a request body whole within its
limit; ``state``: the per-app :class:`~provider.service.state.Service`;
``cluster``: the cluster clients, built on first use; ``checks``: which check
answers a key, and how the keys of one request are answered; ``wire``: the
Gatekeeper and Kyverno wire formats and their cache keys; ``auth`` and
``clientcerts``: who may call; ``config``: settings from
``MANIFEST_PROVIDER_*``; ``serve`` and ``worker``: gunicorn with TLS;
``metrics``; ``dev`` and ``devcerts``: ``make run``.
"""
