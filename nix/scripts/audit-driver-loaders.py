#!/usr/bin/env python3
"""Check nix/driver-loaders.json against the real wheels of each stack and the Nix code.

    python nix/scripts/audit-driver-loaders.py [--cache DIR]

Reads the text sources of the packages the data's "scan" names, in the wheels of each stack's
uv.lock (downloaded into the cache, sha256 checked, as the ELF audit does), finds every line that
names a driver library (libcuda.so, libnvidia-ml.so), links -lcuda or asks cuda-pathfinder for
"cuda"/"nvml", and prints what the data does not account for: a file no path covers and no
"not_loads" entry excuses, a glob that covers nothing, an evidence line the wheel does not have,
a mechanism the Nix code lacks, a path without its fields. Exit status 1 when anything is off.
tests/test_driver_loaders.py runs the same checks.
"""

from __future__ import annotations

import argparse
import fnmatch
import importlib.util
import json
import re
import sys
import tomllib
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DATA = REPO / "nix" / "driver-loaders.json"
FIELDS = ("id", "stacks", "loads", "object", "search", "holds", "covers", "evidence", "h200")


def wheel_audit():
    """The ELF audit's uv.lock reader and downloader: both audits read the same wheels."""
    spec = importlib.util.spec_from_file_location("audit_wheels", REPO / "nix" / "scripts" / "audit-wheel-libraries.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def stack_wheels(stack: str, packages: list[str], cache: Path) -> dict[str, Path]:
    """package -> the wheel of that package in the stack's uv.lock (cp312, x86_64 Linux)."""
    audit = wheel_audit()
    lock = tomllib.loads(audit.stack_files(stack)["lock"].read_text())
    found = {}
    for package in lock["package"]:
        if package["name"] in packages and package.get("wheels"):
            wheel = audit.best_wheel(package, "cp312")
            found[package["name"]] = audit.download(wheel["url"], wheel["hash"].removeprefix("sha256:"), cache)
    return found


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


def problems(
    data: dict, scans: dict[str, dict[str, dict[str, list[str]]]], wheels: dict[str, dict[str, Path]]
) -> list[str]:
    """Everything keeping the data from accounting for the wheels; empty when it does.

    scans: stack -> package -> file -> matching lines; wheels: stack -> package -> wheel path."""
    found = []
    for path in data["paths"]:
        found += [f"{path.get('id', path)}: no {f}" for f in FIELDS if f not in path]
    globs = [(g, p["id"]) for p in data["paths"] for g in p.get("covers", [])]
    globs += [(g, "not_loads") for g in data["not_loads"]]
    used = set()
    for stack, packages in scans.items():
        for package, files in packages.items():
            for file, lines in files.items():
                key = f"{package}:{file}"
                owner = next((g for g, _ in globs if fnmatch.fnmatch(key, g)), None)
                if owner is None:
                    found.append(f"{stack} {key}: loads the driver ({lines[0]}) and no path covers it")
                else:
                    used.add(owner)
    found += [f"{owner} {g}: covers no file of the wheels" for g, owner in globs if g not in used]
    for path in data["paths"]:
        for stack, lines in path.get("evidence", {}).items():
            for entry in lines:
                package, file, line, text = re.match(r"([\w.-]+):([^:]+):(\d+): (.*)", entry).groups()
                wheel = wheels.get(stack, {}).get(package)
                actual = wheel_line(wheel, file, int(line)) if wheel else None
                if actual is None or text.strip() not in actual:
                    found.append(f"{path['id']} {stack} {package}:{file}:{line}: the wheel has {actual!r}")
    return found + mechanism_problems(data)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cache", type=Path, default=Path.home() / ".cache" / "sglang-eagle3-wheel-audit")
    args = parser.parse_args()
    data = json.loads(DATA.read_text())
    scan_spec = data["scan"]
    stacks = sorted({s for p in data["paths"] for s in p["stacks"]})
    wheels = {s: stack_wheels(s, scan_spec["packages"] + ["torch"], args.cache) for s in stacks}
    scans = {
        s: {p: scan(w, scan_spec["pattern"], scan_spec["suffixes"]) for p, w in wheels[s].items() if p != "torch"}
        for s in stacks
    }
    found = problems(data, scans, wheels)
    print("\n".join(found) or "every driver load of the wheels is accounted for")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
