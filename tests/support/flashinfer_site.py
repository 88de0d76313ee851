"""FlashInfer 0.6.3 importable on this Python: the pinned wheel and uv.lock's apache-tvm-ffi, unpacked.

FlashInfer's own code generates the module names and link flags the tests check (its generators
and ninja writer need no GPU); torch comes from the test environment. apache-tvm-ffi is the build
of python/uv.lock's version for this CPython (the lock is universal), sha256 checked.
"""

from __future__ import annotations

import fcntl
import sys
import tomllib
import zipfile
from pathlib import Path

from sglang_eagle3_audits import closure

from support.pinned_wheels import fetch_wheel

REPO = Path(__file__).resolve().parents[2]


def tvm_ffi_wheel(cache: Path) -> Path:
    lock = tomllib.loads((REPO / "python" / "uv.lock").read_text())
    package = next(p for p in lock["package"] if p["name"] == "apache-tvm-ffi")
    wheel = closure.best_wheel(package, f"cp{sys.version_info.major}{sys.version_info.minor}")
    return closure.download(wheel["url"], wheel["hash"].removeprefix("sha256:"), cache)


def flashinfer_site(cache: Path) -> Path:
    """A directory for PYTHONPATH with flashinfer 0.6.3 and tvm_ffi (made once, shared by workers)."""
    site = cache / f"flashinfer-0.6.3-site-py{sys.version_info.major}{sys.version_info.minor}"
    cache.mkdir(parents=True, exist_ok=True)
    with (cache / ".flashinfer-site.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (site / ".complete").exists():
            for wheel in (fetch_wheel("flashinfer-python", cache), tvm_ffi_wheel(cache)):
                with zipfile.ZipFile(wheel) as archive:
                    archive.extractall(site)
            (site / ".complete").touch()
    return site
