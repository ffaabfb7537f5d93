"""A resource bundle signed into a registry as ``manifest-provider sign --image`` pushes one.

Shared by the bundle tests (``tests/unit/oci/test_bundles.py``) and the registry-credential tests
(``tests/unit/oci/test_registry_auth.py``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from provider.cli import main
from provider.keys.pem import private_pem
from provider.signatures.signing import dump_yaml
from tests.support.keys import make_key
from tests.support.manifests import configmap

KEY = make_key("ecdsa-p256", 40)
OBJECT = configmap("app", mode="production")


def sign_image(tmp_path: Path, ref: str, *, key: Any = KEY, tarball: bool = False, docs: Any = None) -> dict[str, Any]:
    """``manifest-provider sign --image ref``: the signed output document."""
    source = tmp_path / "app.yaml"
    source.write_text(dump_yaml(docs or [OBJECT]))
    key_file = tmp_path / "key.pem"
    key_file.write_bytes(private_pem(key, None))
    out = tmp_path / "app.signed.yaml"
    args = ["sign", "-f", str(source), "--key", str(key_file), "--image", ref, "-o", str(out)]
    assert main([*args, "--tarball"] if tarball else args) == 0
    (signed, *_) = yaml.safe_load_all(out.read_text())
    return dict(signed)
