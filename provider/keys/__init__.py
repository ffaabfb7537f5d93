"""Keys: what a signature is checked with, and the rules every key must pass.

* :mod:`~provider.keys.pem` -- public and private keys as PEM blocks, raw signatures with them;
* :mod:`~provider.keys.rules` -- the strength rules every key and signature passes;
* :mod:`~provider.keys.cosign` -- cosign's encrypted private key files;
* :mod:`~provider.keys.openpgp` and :mod:`~provider.keys.openpgp_packets` -- OpenPGP
  certificates and signatures, through the same rules;
* :mod:`~provider.keys.refs` -- keys named by reference (``k8s://NS/NAME``, ``secretRef``);
* :mod:`~provider.keys.signers` -- who signed: what one key or signer entry establishes,
  counted for ``keyOperation``.
"""
