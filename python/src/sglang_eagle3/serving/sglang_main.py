"""``python -m sglang.launch_server``, with the API keys read from files.

SGLang 0.5.9 takes the keys only as ``--api-key KEY`` and ``--admin-api-key KEY``, which
any user can read in the process list. This entry point parses the same arguments with
SGLang's own parser, sets ``api_key`` / ``admin_api_key`` from the files named by
$SGLANG_EAGLE3_API_KEY_FILE / $SGLANG_EAGLE3_ADMIN_API_KEY_FILE (systemd credentials,
mode 0400), and runs the server exactly as sglang.launch_server does. Patch 0005 keeps
SGLang from printing them.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from .. import errors
from .credentials import SECRET_ARGS, KeyFileError, read_key


def server_args_from(argv: list[str], environ: dict[str, str]):
    from sglang.srt.server_args import prepare_server_args

    server_args = prepare_server_args(argv)
    for secret in SECRET_ARGS:
        if environ.get(secret.env):
            try:
                setattr(server_args, secret.field, read_key(Path(environ[secret.env]), secret.setting))
            except KeyFileError as err:
                sys.exit(errors.report(err, "sglang-eagle3"))  # BAD_INPUT; serve reports the server's exit
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
