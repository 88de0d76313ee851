#!/usr/bin/env python3
"""The size of a Nix closure by component: closure-report.py REGISTRATION OUT_DIR.

REGISTRATION is closureInfo's `registration` file (per store path: path, narHash, narSize,
deriver, number of references, the references). Store paths are grouped into components
(a CUDA redistributable with all its outputs, a Python wheel, a nixpkgs package) and written,
largest first, as OUT_DIR/closure-size.txt (a table with bars, to read) and
OUT_DIR/closure-size.json (to compare across builds).
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

STORE_NAME = re.compile(r"^/nix/store/[0-9a-z]{32}-(?P<name>.+)$")
# cuda13.0-libcublas-13.1.0.3-lib -> cuda: libcublas
CUDA = re.compile(r"^cuda\d+\.\d+-(?P<pname>.+?)-\d[\w.]*(-\w+)?$")
# python3.12-torch-2.9.1+cu130 -> python: torch
PYTHON_PACKAGE = re.compile(r"^python3\.\d+-(?P<pname>.+?)-\d[\w.+]*$")
# glibc-2.40-66-bin -> glibc
VERSIONED = re.compile(r"^(?P<pname>.+?)-\d[\w.+-]*$")


def read_registration(text: str) -> dict[str, int]:
    """store path -> NAR size."""
    lines = text.splitlines()
    sizes, i = {}, 0
    while i < len(lines):
        path, _hash, size, _deriver, count = lines[i : i + 5]
        sizes[path] = int(size)
        i += 5 + int(count)
    return sizes


def component(path: str) -> str:
    name = STORE_NAME.match(path)["name"] if STORE_NAME.match(path) else path
    for pattern, kind in ((CUDA, "cuda"), (PYTHON_PACKAGE, "python")):
        if match := pattern.match(name):
            return f"{kind}: {match['pname']}"
    match = VERSIONED.match(name)
    return match["pname"] if match else name


def report(sizes: dict[str, int]) -> dict:
    components: dict[str, dict] = {}
    for path, size in sizes.items():
        entry = components.setdefault(component(path), {"bytes": 0, "paths": 0})
        entry["bytes"] += size
        entry["paths"] += 1
    ordered = dict(sorted(components.items(), key=lambda item: (-item[1]["bytes"], item[0])))
    return {"total_bytes": sum(sizes.values()), "paths": len(sizes), "components": ordered}


def render(data: dict, width: int = 40) -> str:
    total = data["total_bytes"] or 1
    rows = [f"closure: {data['total_bytes'] / 2**30:.2f} GiB in {data['paths']} store paths", ""]
    for name, entry in data["components"].items():
        share = entry["bytes"] / total
        bar = "#" * max(1, round(share * width)) if entry["bytes"] else ""
        rows.append(f"{entry['bytes'] / 2**20:10.1f} MiB {share:6.1%}  {bar:<{width}}  {name}")
    return "\n".join(rows) + "\n"


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print("usage: closure-report.py REGISTRATION OUT_DIR", file=sys.stderr)
        return 2
    data = report(read_registration(Path(argv[1]).read_text()))
    out = Path(argv[2])
    out.mkdir(parents=True, exist_ok=True)
    (out / "closure-size.json").write_text(json.dumps(data, indent=2) + "\n")
    (out / "closure-size.txt").write_text(render(data))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
