"""Parse argv lists with SGLang's own parser: ServerArgs.add_cli_args + ServerArgs.from_cli_args.

Run with PYTHONPATH=<sglang tree>:<tests/stand_ins>. Reads {"case": [args...]} as JSON
on stdin and prints {"case": {field: value}} for every ServerArgs field, plus the
dataclass defaults under "__defaults__".

ServerArgs.__post_init__ is skipped: it probes the accelerator (and raises "No
accelerator is available" on this machine) and then rewrites values for the hardware.
The round trip checks what the command line says; the parse and from_cli_args's own
mapping (e.g. --tp-size -> tensor_parallel_size -> tp_size) are SGLang's real code.
"""

import argparse
import dataclasses
import json
import sys

from sglang.srt.server_args import ServerArgs

ServerArgs.__post_init__ = lambda self: None


def plain(value):
    return value if isinstance(value, (str, int, float, bool, type(None), list)) else repr(value)


def main():
    cases = json.load(sys.stdin)
    parser = argparse.ArgumentParser(exit_on_error=False)
    ServerArgs.add_cli_args(parser)
    out = {"__defaults__": {f.name: plain(getattr(ServerArgs, f.name, None)) for f in dataclasses.fields(ServerArgs)}}
    for name, argv in cases.items():
        try:
            args = ServerArgs.from_cli_args(parser.parse_args(argv))
            out[name] = {f.name: plain(getattr(args, f.name)) for f in dataclasses.fields(ServerArgs)}
        except (SystemExit, argparse.ArgumentError) as err:
            out[name] = {"__error__": str(err)}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
