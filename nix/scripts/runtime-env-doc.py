#!/usr/bin/env python3
"""The run-time environment (nix/runtime-env.json) as a Markdown table for docs/gpu-host.md.

runtime-env-doc.py            print the table
runtime-env-doc.py --write F  replace the block between the markers in F
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

SPEC = Path(__file__).resolve().parents[1] / "runtime-env.json"
START, END = "<!-- runtime-env:start -->", "<!-- runtime-env:end -->"
WHERE = {
    "driver": "the host's NVIDIA driver",
    "cc": "`cudaPackages.backendStdenv.cc`",
    "cxx": "`cudaPackages.backendStdenv.cc`",
    "glibc": "glibc (already loaded)",
    "cuda:toolkit": "the CUDA tree (`nix/cuda.nix`)",
    "cuda:stubs": "`cuda_cudart`'s stubs (`nix/cuda.nix`)",
    "driver:rpath": "the driver's directory",
    "capabilities:torch": "chosen capabilities only",
    "state": "the unit's StateDirectory, `/var/lib/sglang-eagle3`",
    "cache": "the unit's CacheDirectory, `/var/cache/sglang-eagle3`",
}


KINDS = (
    ("on PATH", "programs", "from"),
    ("variable", "environment", "value"),
    ("library", "libraries", "from"),
    ("path", "paths", "from"),
    ("cache (unit)", "caches", "unit"),
)


def rows(sections: dict, stack: str) -> list[str]:
    found = []
    for kind, section, key in KINDS:
        for name, entry in sections.get(section, {}).items():
            source = entry[key]
            where = WHERE.get(source) or (
                f"nixpkgs `{source.removeprefix('nixpkgs:')}`" if source.startswith("nixpkgs:") else source
            )
            if source.startswith("cache/"):
                where = f"`/var/cache/sglang-eagle3/{source.removeprefix('cache/')}` (the unit's CacheDirectory)"
            found.append(f"| {stack} | {kind} | `{name}` | {where} | {entry['why']} |")
    return found


def table(spec: dict) -> str:
    """The shared entries (every stack), then each stack's own additions."""
    lines = ["| stack | kind | name | from | why |", "|---|---|---|---|---|", *rows(spec, "all")]
    for version, own in spec.get("stacks", {}).items():
        lines += rows(own, f"{version} only")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    text = table(json.loads(SPEC.read_text()))
    if argv[1:2] == ["--write"] and len(argv) == 3:
        doc = Path(argv[2])
        pattern = re.compile(re.escape(START) + r".*?" + re.escape(END), re.S)
        old = doc.read_text()
        if not pattern.search(old):
            print(f"runtime-env-doc: {doc} has no {START} ... {END} block", file=sys.stderr)
            return 2
        doc.write_text(pattern.sub(lambda _: f"{START}\n{text}\n{END}", old))
        return 0
    if len(argv) != 1:
        print("usage: runtime-env-doc.py [--write FILE]", file=sys.stderr)
        return 2
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
