"""The policy: the project's schema, the built-in profiles, and the signer sets.

* :mod:`~provider.policy.schema` -- :class:`~provider.policy.schema.Policy`, read and checked
  from a mapping (Gatekeeper parameters, a Kyverno body, a file), and the rule types;
* ``profiles/`` -- the built-in profiles' YAML, the source of ``provider/data/profiles.json``
  (``tools/make_profiles.py``), which :mod:`~provider.policy.schema` reads;
* :mod:`~provider.policy.attestors` -- Kyverno's nested signer sets, compiled to one tree.
"""
