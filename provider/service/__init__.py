"""The HTTPS service Gatekeeper and Kyverno call (``docs/api.md``).

``app``: the Flask app factory and its routes; ``checks``: which check answers
a key, and how the keys of one request are answered; ``wire``: the Gatekeeper
and Kyverno wire formats; ``auth`` and ``clientcerts``: who may call;
``config``: settings from ``MANIFEST_PROVIDER_*``; ``serve`` and ``worker``:
gunicorn with TLS; ``metrics``; ``dev`` and ``devcerts``: ``make run``.
"""
