"""Libraries of a pinned stack that the test environment does not have, unpacked beside it for one subprocess.

The test environment is the 0.5.9 stack's (transformers 4.57, huggingface_hub 0.x). SGLang 0.5.23 imports
transformers 5 (its configs subclass transformers 5's PreTrainedConfig) and apache-tvm-ffi, so running its own
code (its argument validation, tests/test_sglang_rules.py) needs those: the wheels its uv.lock pins (versions and
sha256 from the lock, as tests/support/hub_clients.py does for the hub) are unpacked into the test cache, and that
directory goes first on the subprocess's PYTHONPATH. Everything else they import comes from the test environment.
The same for either stack's FlashInfer and tvm-ffi, which the test environment leaves out (tests/test_flashinfer_aot.py,
tests/test_driver_loaders.py).
"""

from __future__ import annotations

import fcntl
import os
import tomllib
from pathlib import Path

from packaging.tags import sys_tags
from packaging.utils import parse_wheel_filename

from support.pinned_wheels import download_pinned, unpack
from support.pins import PinError, pins

REPO = Path(__file__).resolve().parents[2]
# tvm-ffi beside the test environment's torch 2.9 loads a torch DLPack addon at import, and compiles one (about 21
# CPU-s) where none is prebuilt (_optional_torch_c_dlpack.py). Both stacks pin torch-c-dlpack-ext, whose prebuilt
# addon loads first, so every set of libraries with tvm-ffi takes it too: the stacks never compile the addon.
DLPACK_ADDON = "torch-c-dlpack-ext"
# What SGLang 0.5.23's validation imports beyond the test environment, and what those need in turn
# (transformers 5 requires typer, which requires shellingham and annotated-doc).
NEWEST_LIBRARIES = ("transformers", "huggingface-hub", "tokenizers", "apache-tvm-ffi", DLPACK_ADDON, "typer",
                    "shellingham", "annotated-doc")  # fmt: skip
# A stack's FlashInfer, importable on this Python (its generators and ninja writer need no GPU).
FLASHINFER_LIBRARIES = ("flashinfer-python", "apache-tvm-ffi", DLPACK_ADDON)


def locked_wheel(workspace: str, name: str) -> dict:
    """``name``'s entry in a stack's uv.lock: the wheel this interpreter can install, its version and sha256."""
    lock = tomllib.loads((REPO / workspace / "uv.lock").read_text())
    entry = next((p for p in lock["package"] if p["name"] == name), None)
    if entry is None:
        raise PinError(f"{workspace}/uv.lock has no {name}")
    supported = list(sys_tags())
    ranked = []
    for wheel in entry.get("wheels", []):
        file = wheel["url"].rsplit("/", 1)[1]
        tags = parse_wheel_filename(file)[3]
        rank = min((supported.index(t) for t in tags if t in supported), default=None)
        if rank is not None:
            ranked.append((rank, file, wheel))
    if not ranked:
        raise PinError(f"{workspace}/uv.lock has no wheel of {name} {entry['version']} for this Python")
    _, file, wheel = min(ranked)
    return {"version": entry["version"], "wheel": file, "sha256": wheel["hash"].removeprefix("sha256:"),
            "pinned_by": f"{workspace}/uv.lock"}  # fmt: skip


def stack_libraries(version: str, names: tuple[str, ...], cache_dir: Path) -> Path:
    """A directory holding ``names`` as the stack of SGLang ``version`` pins them, unpacked (once, shared by the
    test workers)."""
    workspace = pins()["stacks"][version]["workspace"]
    locked = {name: locked_wheel(workspace, name) for name in names}
    target = cache_dir / ("libraries-" + "-".join(f"{n}-{p['version']}" for n, p in sorted(locked.items())))
    wheels = {name: download_pinned(pin, cache_dir, name) for name, pin in locked.items()}
    with (cache_dir / ".download.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (target / ".complete").is_file():
            for wheel in wheels.values():
                unpack(wheel, target)
            (target / ".complete").touch()
    return target


def with_path(env: dict[str, str], *paths: Path) -> dict[str, str]:
    """``env`` with ``paths`` first on PYTHONPATH."""
    return {**env, "PYTHONPATH": os.pathsep.join([*map(str, paths), *filter(None, [env.get("PYTHONPATH")])])}
