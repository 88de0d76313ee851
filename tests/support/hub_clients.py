"""The huggingface_hub of each pinned stack, for running `sglang-eagle3 models` under each.

The two stacks have different hub majors: SGLang 0.5.9's (python/uv.lock, the test environment)
pins 0.x, which raises requests' exceptions; SGLang 0.5.23's (transformers 5 needs >= 1.31)
pins 1.x, which raises httpx's and resumes differently. The versions and the wheel's sha256 are
read from each stack's uv.lock (nix/pins.json names the locks). A hub that is not the test
environment's is unpacked into a cache directory that goes first on the CLI's PYTHONPATH; its
dependencies must already be in the test environment (checked: tests/requirements.txt names them).
"""

from __future__ import annotations

import fcntl
import importlib.metadata
import os
import tomllib
from dataclasses import dataclass
from pathlib import Path

from packaging.requirements import Requirement

from support.pinned_wheels import download_pinned, unpack
from support.pins import PinError, pins

REPO = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class HubClient:
    version: str
    path: Path | None  # prepended to PYTHONPATH; None: the test environment's own

    @property
    def major(self) -> int:
        return int(self.version.split(".")[0])

    def env(self, env: dict[str, str]) -> dict[str, str]:
        if self.path is None:
            return env
        return {**env, "PYTHONPATH": os.pathsep.join(filter(None, [str(self.path), env.get("PYTHONPATH")]))}


def locked_hub(workspace: str) -> dict:
    """huggingface-hub's entry in a stack's uv.lock: version, wheel file name and sha256."""
    lock = tomllib.loads((REPO / workspace / "uv.lock").read_text())
    entry = next(p for p in lock["package"] if p["name"] == "huggingface-hub")
    wheel = entry["wheels"][0]  # pure Python: one wheel
    return {"version": entry["version"], "wheel": wheel["url"].rsplit("/", 1)[1],
            "sha256": wheel["hash"].removeprefix("sha256:"), "pinned_by": f"{workspace}/uv.lock"}  # fmt: skip


def stack_hubs() -> dict[str, dict]:
    """Each pinned stack's huggingface-hub, by stack version."""
    return {v: locked_hub(s["workspace"]) for v, s in pins()["stacks"].items() if not v.startswith("_")}


def hub_client(pin: dict, cache_dir: Path) -> HubClient:
    """The test environment's hub if it is the pinned version, else the pinned wheel unpacked into cache_dir."""
    if importlib.metadata.version("huggingface_hub") == pin["version"]:
        return HubClient(pin["version"], None)
    target = cache_dir / f"huggingface_hub-{pin['version']}"
    wheel = download_pinned(pin, cache_dir, "huggingface_hub")
    with (cache_dir / ".download.lock").open("w") as lock:  # test workers share the cache
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (target / ".complete").is_file():
            unpack(wheel, target)
            (target / ".complete").touch()
    _check_dependencies(next(target.glob("huggingface_hub-*.dist-info")) / "METADATA")
    return HubClient(pin["version"], target)


def _check_dependencies(metadata: Path) -> None:
    """Every requirement of the unpacked hub is met by the test environment (nothing else is installed)."""
    for line in metadata.read_text().splitlines():
        if not line.startswith("Requires-Dist:"):
            continue
        req = Requirement(line.removeprefix("Requires-Dist:").strip())
        if req.marker is not None and not req.marker.evaluate({"extra": ""}):
            continue
        try:
            have = importlib.metadata.version(req.name)
        except importlib.metadata.PackageNotFoundError:
            have = None
        if have is None or not req.specifier.contains(have, prereleases=True):
            raise PinError(
                f"{metadata.parent.name} needs {req}, the test environment has {have or 'none'}: "
                "name it in tests/requirements.txt (and python/uv.lock) so tests/run installs it"
            )
