"""Keyless (Fulcio + Rekor) and certificate signers, verified offline.

``signer`` checks one ``signers`` entry against an object's signature sets;
``certificates`` reads certificates, builds paths and reads identities;
``rekor`` checks transparency-log bundles; ``trust`` loads the sigstore
TrustedRoot and certificate signers' CA roots. ``docs/keyless.md``.
"""
