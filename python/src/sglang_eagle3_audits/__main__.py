"""python -m sglang_eagle3_audits: check or write every audit of the stacks' real wheels, or list them.

    python -m sglang_eagle3_audits --check                 every audit of every stack: exit 1 if data is stale or
                                                           something is not accounted for
    python -m sglang_eagle3_audits --write [--only NAME]   write the data (and docs), then report as --check does
    python -m sglang_eagle3_audits --check --docs          only the docs, from the data as committed (no wheel read)
    python -m sglang_eagle3_audits --list [--json]         the audits: files, inputs, commands (--json: the
                                                           register's entries, as generated.json holds them)
    python -m sglang_eagle3_audits --markdown NAME         print an audit's docs from its data

--stack VERSION (again for more) limits a run to stacks of nix/pins.json (default: every stack; the docs and the
checks across stacks run only with every stack); --cache DIR is where wheels and scans are kept (default
~/.cache/sglang-eagle3-tests, the test suite's: each wheel is downloaded and scanned once for both). A wheel not
in the cache is downloaded from PyPI (sha256 checked). Exit status: 0 current and accounted for, 1 stale or not
accounted for (or a download that failed), 2 bad input.
"""

from __future__ import annotations

import argparse
import json
import sys
import urllib.error
from pathlib import Path

from sglang_eagle3.errors import Eagle3Error

from . import base, registry
from .closure import DEFAULT_CACHE


def parser() -> argparse.ArgumentParser:
    made = argparse.ArgumentParser(prog=base.COMMAND, description=__doc__.split("\n\n")[0],
                                   formatter_class=argparse.RawDescriptionHelpFormatter,
                                   epilog=__doc__.split("\n\n", 1)[1])  # fmt: skip
    mode = made.add_mutually_exclusive_group(required=True)
    mode.add_argument("--check", action="store_true", help="compare every data file and docs block; run the checks")
    mode.add_argument("--write", action="store_true", help="write every data file and docs block; run the checks")
    mode.add_argument("--list", action="store_true", help="list the audits")
    mode.add_argument("--markdown", metavar="NAME", help="print the docs of audit NAME from its data")
    made.add_argument("--json", action="store_true", help="with --list: the register's entries as JSON")
    made.add_argument("--docs", action="store_true", help="with --check/--write: only the docs, from the data")
    made.add_argument("--stack", action="append", default=[], metavar="VERSION", help="a stack (again for more)")
    made.add_argument("--only", action="append", metavar="NAME", help="an audit (again for more)")
    made.add_argument("--cache", type=Path, default=DEFAULT_CACHE, help="where wheels and scans are kept")
    return made


def main(argv: list[str] | None = None) -> int:
    made = parser()
    args = made.parse_args(argv)
    if args.json and not args.list or args.docs and not (args.check or args.write):
        made.error("--json goes with --list, --docs with --check or --write")
    try:
        audits = registry.named([args.markdown] if args.markdown else args.only)
    except KeyError as err:
        made.error(f"no audit {err.args[0]} (audits: {', '.join(a.name for a in registry.REGISTRY)})")
    try:
        chosen = base.closures(args.stack, args.cache)
        if args.list:
            return listed(audits, args.json)
        if args.markdown:
            if audits[0].docs is None:
                made.error(f"the {args.markdown} audit has no docs")
            print(audits[0].markdown({c: audits[0].committed(c) for c in chosen.values()}))
            return 0
        if args.docs:
            return base.run_docs(audits, chosen, args.write)
        return base.run(audits, chosen, args.write)
    except Eagle3Error as err:
        print(f"{base.COMMAND}: {err}", file=sys.stderr)
        return int(err.status)
    except (OSError, urllib.error.URLError) as err:
        print(f"{base.COMMAND}: {err} (a wheel not in the cache is downloaded from PyPI)", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"{base.COMMAND}: interrupted; what was written so far is kept (each file whole)", file=sys.stderr)
        return 130


def listed(audits: list[base.Audit], as_json: bool) -> int:
    entries = registry.entries()
    names = {a.name for a in audits} | {f"{a.name}-docs" for a in audits}
    chosen = {name: entry for name, entry in entries.items() if name in names}
    if as_json:
        print(json.dumps(chosen, indent=1))
        return 0
    for name, entry in chosen.items():
        print(f"{name}: {', '.join(entry['files'])}")
        print(f"  inputs: {'; '.join(entry['inputs'])}")
        for command in [*(entry["write"] or []), *entry["check"]]:
            print(f"  {' '.join(command)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
