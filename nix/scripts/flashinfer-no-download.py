#!/usr/bin/env python3
"""Make FlashInfer refuse to download a cubin when FLASHINFER_NO_DOWNLOAD is set, as 0.7.2 does.

FlashInfer loads precompiled kernels (cubins, their headers and checksum files) through
jit/cubin_loader.py get_cubin: from FLASHINFER_CUBIN_DIR (flashinfer-cubin's directory where that
wheel is installed), else it downloads the file from FLASHINFER_CUBINS_REPOSITORY into that
directory. In the Nix store the directory is read-only and a host without internet (a Kubernetes
NetworkPolicy, an air-gapped node) has no repository: 0.6.3 then fails on the download's file lock
or after its retries, without saying which kernel was missing. FlashInfer 0.7.2's get_artifact
raises, before any download, "Artifact not found locally: <file> ... FLASHINFER_NO_DOWNLOAD is
set"; this backports that check to a cubin_loader.py without it (0.6.3) and leaves one that has it
(0.7.2) as it is. The stacks' environment sets FLASHINFER_NO_DOWNLOAD=1 (nix/runtime-env.json).
Stops with an error when the file has neither the check nor the expected download step.

    python flashinfer-no-download.py FLASHINFER_PACKAGE_DIR/jit/cubin_loader.py
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

VARIABLE = "FLASHINFER_NO_DOWNLOAD"
# 0.6.3's get_cubin, after the local load failed: the line that builds the download URL.
DOWNLOAD = re.compile(
    r"^(?P<indent>[ \t]+)uri = safe_urljoin\(FLASHINFER_CUBINS_REPOSITORY, file_name\)\n", re.MULTILINE
)


def patch(source: str) -> tuple[str, str]:
    """(the patched source, what was done)."""
    if f'os.getenv("{VARIABLE}")' in source:
        return source, f"already refuses to download when {VARIABLE} is set"
    if "import os\n" not in source:
        raise ValueError("expected `import os` in cubin_loader.py")

    def refuse(match: re.Match) -> str:
        i = match["indent"]
        return (
            f'{i}if os.getenv("{VARIABLE}"):\n'
            f"{i}    raise RuntimeError(\n"
            f'{i}        f"Artifact not found locally: {{file_name}} (looked at {{cubin_path}}). "\n'
            f'{i}        f"{VARIABLE} is set — refusing to download. "\n'
            f'{i}        f"This means flashinfer-cubin is missing this file."\n'
            f"{i}    )\n" + match.group(0)
        )

    patched, count = DOWNLOAD.subn(refuse, source)
    if count != 1:
        raise ValueError(f"expected one download step (uri = safe_urljoin(...)) in get_cubin, found {count}")
    return patched, f"refuses to download when {VARIABLE} is set (backported from FlashInfer 0.7.2)"


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: flashinfer-no-download.py CUBIN_LOADER_PY", file=sys.stderr)
        return 2
    path = Path(argv[1])
    try:
        patched, done = patch(path.read_text())
    except (OSError, ValueError) as err:
        print(f"flashinfer-no-download: {path}: {err}", file=sys.stderr)
        return 1
    path.write_text(patched)
    print(f"flashinfer-no-download: {path.name} {done}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
