"""``python -m sglang.launch_server``, with the secrets read from files.

SGLang takes its keys (and 0.5.23 the TLS key's password) only as arguments, which any user can read in the process
list. This entry point does what the installed SGLang's own ``launch_server`` does (its start-up calls, read from
its ``__main__`` block), parses the same arguments with SGLang's own parser, sets the secrets from the files named
by $SGLANG_EAGLE3_*_FILE (systemd credentials, mode 0400), and runs the server. Patch 0005 keeps SGLang from printing
them.
"""

from __future__ import annotations

import ast
import os
import sys
from collections.abc import Callable
from pathlib import Path

from .. import errors
from .credentials import SECRET_ARGS, KeyFileError, read_key

PARSE = "prepare_server_args"


def startup_calls() -> list[Callable[[], object]]:
    """The calls SGLang's own ``launch_server`` makes before it parses the arguments: each bare ``name()`` of its
    ``if __name__ == "__main__":`` block before ``prepare_server_args``, where ``name`` is an SGLang function it
    imports (0.5.23: ``load_plugins``, which runs the installed SGLang plugins and applies their hooks)."""
    import sglang.launch_server as entry

    module = ast.parse(Path(entry.__file__).read_text(encoding="utf-8"))
    main = next((n for n in module.body if isinstance(n, ast.If) and "__main__" in ast.unparse(n.test)), None)
    calls = []
    for stmt in main.body if main else []:
        if PARSE in ast.unparse(stmt):
            break
        call = stmt.value if isinstance(stmt, ast.Expr) else None
        if isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and not call.args and not call.keywords:
            function = getattr(entry, call.func.id, None)
            if callable(function) and getattr(function, "__module__", "").startswith("sglang."):
                calls.append(function)
    return calls


def server_args_from(argv: list[str], environ: dict[str, str]):
    from sglang.srt.server_args import prepare_server_args

    server_args = prepare_server_args(argv)
    for secret in SECRET_ARGS:
        if environ.get(secret.env):
            if not hasattr(server_args, secret.field):  # --ssl-keyfile-password on 0.5.9
                err = errors.BadInput(f"{secret.setting}: this SGLang has no {secret.flag}; unset {secret.setting}")
                sys.exit(errors.report(err, "sglang-eagle3"))
            try:
                setattr(server_args, secret.field, read_key(Path(environ[secret.env]), secret.setting))
            except KeyFileError as err:
                sys.exit(errors.report(err, "sglang-eagle3"))  # BAD_INPUT; serve reports the server's exit
    return server_args


def prepare(argv: list[str], environ: dict[str, str]):
    """Everything ``launch_server`` does before ``run_server``, the keys from their files."""
    for call in startup_calls():
        call()
    return server_args_from(argv, environ)


def main() -> None:
    from sglang.launch_server import run_server
    from sglang.srt.utils import kill_process_tree

    server_args = prepare(sys.argv[1:], dict(os.environ))
    try:
        run_server(server_args)
    finally:
        kill_process_tree(os.getpid(), include_parent=False)


if __name__ == "__main__":
    main()
