#!/usr/bin/env python3
"""Let SGLang's get_libnuma find nixpkgs' libnuma: the store path after the plain sonames.

SGLang binds a scheduler process to its GPU's NUMA node (--numa-node, and 0.5.23's NUMA binding)
with ctypes.CDLL("libnuma.so") / CDLL("libnuma.so.1"), which search only the loader's default
paths. In the Nix closure no wheel of SGLang 0.5.23 links libnuma (0.5.9's sgl-kernel does, so
there it is already loaded only once sgl_kernel is imported), so the load fails, get_libnuma
returns None and the binding is dropped with a log line. As driver-dir-patch.py nvml does for NVML,
the list of names gets LIBNUMA_DIR/libnuma.so.1 last: a host library still wins where there is
one, and the store's is there on every host. SGLang 0.5.9 has the loop in srt/utils/common.py,
0.5.23 in srt/utils/numa_utils.py; the one file holding it is patched. Stops with an error when
the tree no longer has exactly one such loop.

    python libnuma-path.py SGLANG_PACKAGE_DIR LIBNUMA_DIR
"""

from __future__ import annotations

import sys
from pathlib import Path

NAMES = '["libnuma.so", "libnuma.so.1"]'
LOOP = f"for libnuma_so in {NAMES}:"


def patch(source: str, libnuma_dir: str) -> str:
    return source.replace(LOOP, f'for libnuma_so in ["libnuma.so", "libnuma.so.1", "{libnuma_dir}/libnuma.so.1"]:')


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print("usage: libnuma-path.py SGLANG_PACKAGE_DIR LIBNUMA_DIR", file=sys.stderr)
        return 2
    package, libnuma_dir = Path(argv[1]), argv[2]
    holders = [p for p in sorted((package / "srt" / "utils").glob("*.py")) if LOOP in p.read_text()]
    if len(holders) != 1 or holders[0].read_text().count(LOOP) != 1:
        print(f"libnuma-path: expected one `{LOOP}` in {package}/srt/utils, found {holders or 'none'}",
              file=sys.stderr)  # fmt: skip
        return 1
    holders[0].write_text(patch(holders[0].read_text(), libnuma_dir))
    print(f"libnuma-path: {holders[0].relative_to(package)} falls back to {libnuma_dir}/libnuma.so.1")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
