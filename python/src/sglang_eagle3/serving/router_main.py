"""``sglang-eagle3-router``: the router (smg, the Shepherd Model Gateway), API key read from a file.

smg takes its API key only as ``--api-key KEY``, which any user can read in the process list, or through its
Python API. This entry point takes every other argument of ``smg launch`` unchanged (parsed by smg's own parser),
reads the key as the server reads its own (``--api-key-file PATH`` or systemd's credential; credentials.read_key),
and hands it to the router in this process: never in argv, the environment or a log. The router checks that one
key on clients and sends it to every worker, so the servers behind it must be started with the same key.

With Kubernetes service discovery smg's launcher turns on its multi-model mode (IGW), which answers 400
``missing_model`` to SGLang's ``/generate`` without a ``model`` field; the servers behind this router serve one
model, so it stays in single-model mode unless ``--enable-igw`` is given (docs/router.md).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from .. import errors
from ..errors import BadInput, Eagle3Error
from . import credentials

PROG = "sglang-eagle3-router"


def split_key_file(argv: list[str]) -> tuple[Path | None, list[str]]:
    """(--api-key-file, the router's own arguments); refuses a key given on the command line."""
    rest: list[str] = []
    key_file: Path | None = None
    args = iter(argv)
    for arg in args:
        if arg == "--api-key" or arg.startswith("--api-key="):
            raise BadInput(
                "the API key must not be given on the command line (any user can read it there); "
                "put it in a file readable only by the router and pass --api-key-file PATH"
            )
        if arg == "--api-key-file":
            value = next(args, None)
            if value is None:
                raise BadInput("--api-key-file needs a path, e.g. --api-key-file /run/secrets/router-key")
            key_file = Path(value)
        elif arg.startswith("--api-key-file="):
            key_file = Path(arg.split("=", 1)[1])
        else:
            rest.append(arg)
    return key_file, rest


def main(argv: list[str] | None = None, environ: dict[str, str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    environ = dict(os.environ) if environ is None else environ
    try:
        given, router_argv = split_key_file(argv)
        # The server's own reading (credentials.read_key): a regular file, private to this user, one token.
        key_file = credentials.key_file(credentials.API_KEY, given, environ)
        what = "--api-key-file" if given else f"the credential {credentials.API_KEY.credential}"
        key = credentials.read_key(key_file, what) if key_file else None
    except Eagle3Error as err:  # a key on the command line, a key file that cannot be used
        sys.exit(errors.report(err, PROG))
    try:
        from smg.launch_router import parse_router_args
        from smg.router import Router
    except ImportError:
        missing = BadInput("the smg package (the router) is not installed (pip install 'sglang-eagle3[router]')")
        sys.exit(errors.report(missing, PROG))
    sys.argv[0] = PROG  # so the router's own --help and usage errors name this command
    router_args = parse_router_args(router_argv)  # smg's parser: bad arguments exit 2 with its message
    router_args.api_key = key
    try:
        # What smg's launch_router does, less turning IGW on for discovery (above).
        router_args._validate_router_args()
        Router.from_args(router_args).start()  # blocks until the router stops (SIGTERM: graceful)
    except Exception as err:  # the router's own errors: a bad combination of arguments, a port in use
        message = str(err).replace(key, "<api key>") if key else str(err)
        sys.exit(errors.report(Eagle3Error(f"the router stopped with an error: {message}"), PROG))


if __name__ == "__main__":
    main()
