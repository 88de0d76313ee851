"""Which object loads the NVIDIA driver, path by path: the hand-written nix/driver-loaders.json, checked against the
real wheels of every stack and the Nix code.

The text sources of the packages the data's "scan" names are read from each stack's wheels (its uv.lock's), and
every line that names a driver library (libcuda.so, libnvidia-ml.so), links -lcuda or asks cuda-pathfinder for
"cuda"/"nvml" is found. What the data does not account for is reported: a file no path covers and no "not_loads"
entry excuses, a glob that covers nothing, an evidence line the wheel does not have, a mechanism the Nix code lacks,
a path without its fields. tests/test_driver_loaders.py runs the same checks.
"""

from __future__ import annotations

import fnmatch
import json
import re
import zipfile
from pathlib import Path

from .base import Audit
from .closure import REPO, Closure, read_json

DATA = REPO / "nix" / "driver-loaders.json"
FIELDS = ("id", "stacks", "loads", "object", "search", "holds", "covers", "evidence", "h200")


def scan(wheel: Path, pattern: str, suffixes: list[str]) -> dict[str, list[str]]:
    """file -> "line: text" of each line matching `pattern`, over the wheel's text sources."""
    regex = re.compile(pattern)
    hits: dict[str, list[str]] = {}
    with zipfile.ZipFile(wheel) as archive:
        for name in archive.namelist():
            if not name.endswith(tuple(suffixes)) or ".dist-info/" in name:
                continue
            text = archive.read(name).decode("utf-8", errors="replace")
            lines = [f"{i}: {line.strip()}" for i, line in enumerate(text.splitlines(), 1) if regex.search(line)]
            if lines:
                hits[name] = lines
    return hits


def stack_wheels(closure: Closure, packages: list[str]) -> dict[str, Path]:
    """package -> the wheel of that package in the stack's uv.lock (the stack's CPython, x86_64 Linux)."""
    return {name: closure.wheel(closure.locked(name)) for name in packages if closure.locked(name).get("wheels")}


def wheel_line(wheel: Path, file: str, line: int) -> str | None:
    with zipfile.ZipFile(wheel) as archive:
        try:
            lines = archive.read(file).decode("utf-8", errors="replace").splitlines()
        except KeyError:
            return None
    return lines[line - 1].strip() if 0 < line <= len(lines) else None


def mechanism_problems(data: dict) -> list[str]:
    """Each mechanism a path relies on is in the Nix code (or, for nixpkgs' own, named as such)."""
    overrides = (REPO / "nix" / "python-overrides.nix").read_text()
    env = json.loads((REPO / "nix" / "runtime-env.json").read_text())
    checks = {
        "triton-rpath": "scripts/driver-dir-patch.py} triton $out/${sitePackages}/triton/runtime/build.py" in overrides,
        "flashinfer-rpath": env["environment"].get("FLASHINFER_EXTRA_LDFLAGS", {}).get("value") == "driver:rpath"
        and '"driver:rpath" = "-Xlinker -rpath=${pkgs.addDriverRunpath.driverLink}/lib"'
        in (REPO / "nix" / "runtime-env.nix").read_text(),
        "toolkit-driver-link": "ln -s ${driverLibcuda} $dir/libcuda.so.1" in (REPO / "nix" / "cuda.nix").read_text(),
        "nvml-fallback": "scripts/driver-dir-patch.py} nvml $out/${sitePackages}/pynvml.py" in overrides,
        "wheel-driver-runpath": "lib.optional needs.driver pkgs.autoAddDriverRunpath" in overrides,
        "cudart-driver-runpath": True,  # nixpkgs' buildRedist, cited in the data
        "aot-driver-runpath": "autoAddDriverRunpath" in (REPO / "nix" / "flashinfer-aot.nix").read_text(),
        "already-loaded": True,
    }
    found = [f"mechanism {m}: not described in mechanisms" for m in checks if m not in data["mechanisms"]]
    found += [f"mechanism {m}: unknown to the check" for m in data["mechanisms"] if m not in checks]
    found += [f"mechanism {m}: the Nix code no longer has it" for m, ok in checks.items() if not ok]
    for path in data["paths"]:
        found += [f"{path['id']}: holds by unknown {h}" for h in path["holds"] if h not in data["mechanisms"]]
    return found


def globs(data: dict) -> list[tuple[str, str]]:
    """(glob, the path that covers it or "not_loads") for every file pattern of the data."""
    return [(g, p["id"]) for p in data["paths"] for g in p.get("covers", [])] + [
        (g, "not_loads") for g in data["not_loads"]
    ]


def uncovered(data: dict, stack: str, scans: dict[str, dict[str, list[str]]]) -> tuple[list[str], set[str]]:
    """(each file of a stack's scans that loads the driver and no glob covers, the globs that cover one)."""
    found, used = [], set()
    for package, hits in scans.items():
        for file, lines in hits.items():
            key = f"{package}:{file}"
            owner = next((g for g, _ in globs(data) if fnmatch.fnmatch(key, g)), None)
            if owner is None:
                found.append(f"{stack} {key}: loads the driver ({lines[0]}) and no path covers it")
            else:
                used.add(owner)
    return found, used


def evidence_problems(data: dict, stack: str, wheels: dict[str, Path]) -> list[str]:
    """Each evidence line a path cites for the stack is in the stack's wheel, as cited."""
    found = []
    for path in data["paths"]:
        for entry in path.get("evidence", {}).get(stack, []):
            package, file, line, text = re.match(r"([\w.-]+):([^:]+):(\d+): (.*)", entry).groups()
            actual = wheel_line(wheels[package], file, int(line)) if package in wheels else None
            if actual is None or text.strip() not in actual:
                found.append(f"{path['id']} {stack} {package}:{file}:{line}: the wheel has {actual!r}")
    return found


def problems(
    data: dict, scans: dict[str, dict[str, dict[str, list[str]]]], wheels: dict[str, dict[str, Path]]
) -> list[str]:
    """Everything keeping the data from accounting for every stack's wheels; empty when it does.

    scans: stack -> package -> file -> matching lines; wheels: stack -> package -> wheel path."""
    found, used = [], set()
    for stack, hits in scans.items():
        missing, covering = uncovered(data, stack, hits)
        found += missing
        used |= covering
    found += [p for stack, by_package in wheels.items() for p in evidence_problems(data, stack, by_package)]
    return found + whole_problems(data, used)


def whole_problems(data: dict, used: set[str]) -> list[str]:
    """What the data says as a whole: each path's fields, every glob used (``used``: by some stack), each mechanism."""
    found = [f"{path.get('id', path)}: no {f}" for path in data["paths"] for f in FIELDS if f not in path]
    found += [f"{owner} {g}: covers no file of the wheels" for g, owner in globs(data) if g not in used]
    return found + mechanism_problems(data)


class DriverLoaders(Audit):
    name = "driver-loaders"
    inputs = ("every stack's wheels (every line that loads the driver or NVML)",
              "nix/python-overrides.nix, nix/runtime-env.json, nix/cuda.nix (the mechanisms)")  # fmt: skip
    how = "edit it: each driver load of the wheels is covered by a path or excused with a reason"

    def hand_written(self) -> list[str]:
        return ["nix/driver-loaders.json"]

    def scan(self, closure: Closure) -> dict:
        spec = read_json(DATA, "which object loads the driver, path by path")["scan"]
        wheels = stack_wheels(closure, [*spec["packages"], "torch"])
        scans = {p: scan(w, spec["pattern"], spec["suffixes"]) for p, w in wheels.items() if p != "torch"}
        return {"scans": scans, "wheels": wheels}

    def problems(self, result: dict, closure: Closure) -> list[str]:
        """What one stack shows alone: its loads no path covers, its evidence lines (the rest, across the stacks)."""
        data = read_json(DATA, "")
        return uncovered(data, closure.version, result["scans"])[0] + evidence_problems(
            data, closure.version, result["wheels"]
        )

    def across(self, results: dict[Closure, dict]) -> list[str]:
        data = read_json(DATA, "")
        return whole_problems(
            data, set().union(*(uncovered(data, c.version, r["scans"])[1] for c, r in results.items()))
        )


AUDIT = DriverLoaders()
