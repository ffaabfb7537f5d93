"""What the service's own pod specs (manifests/base, the chart) must give it, checked on rendered containers."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def tuf_cache_volume(c: dict[str, Any], volumes: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The emptyDir the TUF client's cache lands on (provider/service/trustroot.py), None when refreshing is off.

    Its directory is ``MANIFEST_PROVIDER_TUF_CACHE_DIR``, else one under Python's temporary directory:
    ``TMPDIR``, else ``/tmp`` (the image sets no ``TMPDIR``). On a read-only root it must be a
    writable mount, or the service refuses to start.
    """
    variables = {e["name"]: e.get("value", "") for e in c.get("env", [])}
    if variables.get("MANIFEST_PROVIDER_TUF_URL") == "":
        return None
    cache = Path(variables.get("MANIFEST_PROVIDER_TUF_CACHE_DIR") or variables.get("TMPDIR") or "/tmp")
    by_name = {v["name"]: v for v in volumes}
    (mount,) = [m for m in c["volumeMounts"] if cache.is_relative_to(m["mountPath"]) and not m.get("readOnly")]
    return dict(by_name[mount["name"]]["emptyDir"])
