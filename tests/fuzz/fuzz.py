"""Run one fuzz target under atheris (libFuzzer): ``python tests/fuzz/fuzz.py TARGET [libFuzzer flags] [corpus dirs]``.

TARGET is ``envelope``, ``keys`` or ``wire`` (:mod:`targets`). The ``provider``
package is instrumented for coverage; everything else (PyYAML, cryptography, the
standard library) is not, so the fuzzer steers by our branches. libFuzzer's own
flags follow: ``-max_total_time=S``, ``-timeout=S`` (a hang), ``-rss_limit_mb=M``,
``-artifact_prefix=DIR/`` (where a crashing input is written), then corpus
directories (the first one receives new inputs). ``tests/fuzz/run.py`` runs them all.
"""

from __future__ import annotations

import sys
from pathlib import Path

import atheris

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

with atheris.instrument_imports(include=["provider"]):
    pass


from tests.fuzz.targets import TARGETS


def main() -> None:
    if len(sys.argv) < 2 or sys.argv[1] not in TARGETS:
        raise SystemExit(f"usage: fuzz.py {{{','.join(TARGETS)}}} [libFuzzer flags] [corpus dirs]")
    target = TARGETS[sys.argv[1]]
    atheris.Setup([sys.argv[0], *sys.argv[2:]], target)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
