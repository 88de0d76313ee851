#!/usr/bin/env python3
"""A FlashInfer install cut down to its all-reduce paths, small enough for a device call to carry.

usage: flashinfer-comm-site.py WHEEL OUT.tar.gz

FlashInfer 0.7.2's wheel (65 MB; 457 MB unpacked) is more than a call to the lent GPU machines may carry
(64 MiB in all), and nothing can be downloaded there. nix/scripts/allreduce-check.py needs only
flashinfer.comm and the JIT builds of its two all-reduce modules. The archive keeps:
- every Python file except the kernel families flashinfer.comm never imports (DROPPED);
- the headers the JIT compiles against (data/include, data/cccl, data/spdlog) and csrc's *.h;
- the csrc sources the generators of the all-reduce modules name (GENERATORS, read from jit/comm.py);
- flashinfer/__init__.py cut to `version` and `jit` (the full one imports every kernel family, some
  needing packages the machine lacks: cutlass-dsl, cudnn-frontend).
Unpack it into a directory and put that on PYTHONPATH (with apache-tvm-ffi beside it). Exit status 2
for bad input.
"""

from __future__ import annotations

import ast
import io
import sys
import tarfile
import zipfile
from pathlib import PurePosixPath

GENERATORS = ("gen_trtllm_comm_module", "gen_pcie_ipc_comm_module")
DROPPED = ("flashinfer/experimental/", "flashinfer/fused_moe/", "flashinfer/moe_ep/")
HEADERS = ("flashinfer/data/include/", "flashinfer/data/cccl/", "flashinfer/data/spdlog/")
INIT = "from .version import __version__ as __version__\nfrom . import jit as jit\n"


def generator_sources(comm_py: str) -> dict[str, list[str]]:
    """The csrc files each generator of GENERATORS names (``FLASHINFER_CSRC_DIR / "x.cu"``)."""
    found = {}
    for node in ast.parse(comm_py).body:
        if isinstance(node, ast.FunctionDef) and node.name in GENERATORS:
            found[node.name] = [
                n.right.value
                for n in ast.walk(node)
                if isinstance(n, ast.BinOp) and isinstance(n.right, ast.Constant) and "CSRC_DIR" in ast.unparse(n.left)
            ]
    return found


def kept(name: str, sources: set[str]) -> bool:
    if name.endswith("/") or name.startswith(DROPPED):
        return False
    path = PurePosixPath(name)
    if name.startswith("flashinfer/data/csrc/"):
        return path.parent.name == "csrc" and (path.suffix == ".h" or path.name in sources)
    if name.startswith("flashinfer/data/"):
        return name.startswith(HEADERS)
    return name.startswith("flashinfer/") and path.suffix == ".py"


def cut(wheel_path: str, out_path: str) -> dict:
    with zipfile.ZipFile(wheel_path) as wheel:
        names = wheel.namelist()
        if "flashinfer/jit/comm.py" not in names:
            raise ValueError(f"{wheel_path}: no flashinfer/jit/comm.py: not a FlashInfer wheel with comm modules")
        found = generator_sources(wheel.read("flashinfer/jit/comm.py").decode())
        missing = [g for g in GENERATORS if not found.get(g)]
        if missing:
            raise ValueError(f"{wheel_path}: jit/comm.py has no {', '.join(missing)} naming csrc sources")
        sources = {s for files in found.values() for s in files}
        count = 0
        with tarfile.open(out_path, "w:gz") as tar:
            for name in names:
                if not kept(name, sources):
                    continue
                data = INIT.encode() if name == "flashinfer/__init__.py" else wheel.read(name)
                info = tarfile.TarInfo(name)
                info.size, info.mode = len(data), 0o644
                tar.addfile(info, io.BytesIO(data))
                count += 1
    return {"files": count, "sources": found}


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    try:
        result = cut(*argv)
    except zipfile.BadZipFile as err:
        print(f"flashinfer-comm-site: {argv[0]}: not a wheel ({err})", file=sys.stderr)
        return 2
    except (OSError, ValueError) as err:
        print(f"flashinfer-comm-site: {err}", file=sys.stderr)
        return 2
    print(f"{argv[1]}: {result['files']} files; sources {result['sources']}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
