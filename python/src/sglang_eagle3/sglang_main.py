"""``python -m sglang.launch_server``, with the API key read from a file.

SGLang 0.5.9 takes the key only as ``--api-key KEY``, which any user can read in the
process list. This entry point parses the same arguments with SGLang's own parser,
sets ``api_key`` from the file named by $SGLANG_EAGLE3_API_KEY_FILE (a systemd
credential, mode 0400), and runs the server exactly as sglang.launch_server does.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from .credentials import API_KEY_FILE_ENV


def read_api_key(path: Path) -> str:
    key = path.read_text().strip()
    if not key:
        raise SystemExit(f"sglang-eagle3: the API key file {path} is empty")
    return key


def server_args_from(argv: list[str], environ: dict[str, str]):
    from sglang.srt.server_args import prepare_server_args

    server_args = prepare_server_args(argv)
    if environ.get(API_KEY_FILE_ENV):
        server_args.api_key = read_api_key(Path(environ[API_KEY_FILE_ENV]))
    return server_args


def main() -> None:
    from sglang.launch_server import run_server
    from sglang.srt.utils import kill_process_tree

    server_args = server_args_from(sys.argv[1:], dict(os.environ))
    try:
        run_server(server_args)
    finally:
        kill_process_tree(os.getpid(), include_parent=False)


if __name__ == "__main__":
    main()
