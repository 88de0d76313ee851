#!/usr/bin/env python3
"""Check every generated file against its generator, as the register generated.json lists them (and the audits'
registry, python -m sglang_eagle3_audits --list --json, lists theirs).

    python nix/scripts/check-generated.py            run every check
    python nix/scripts/check-generated.py --write    run every writer, then every check
    python nix/scripts/check-generated.py --quick    leave out the slow ones (the audits that read the real wheels)
    python nix/scripts/check-generated.py --only NAME [--only NAME ...]
    python nix/scripts/check-generated.py --list     the register: each entry, its files and its commands

Run it with the test environment's interpreter (.venv/bin/python: the commands import sglang_eagle3 and run
pytest); `python` in a command is that interpreter. Exits 1 naming each entry whose check failed (with how
to regenerate it), 2 on bad input.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
REGISTER = REPO / "generated.json"


def load(path: Path) -> dict[str, dict]:
    """The register's entries (name -> entry), "_comment" left out; the repository's own register also holds the
    audits' entries, which their one list gives (python -m sglang_eagle3_audits --list --json), not the file."""
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ValueError(f"cannot read the register {path}: {err}") from None
    entries = {name: entry for name, entry in data.items() if not name.startswith("_")}
    return entries | audit_entries() if path.resolve() == REGISTER else entries


def audit_entries() -> dict[str, dict]:
    """The register's entries of the audits of the stacks' real wheels, from the audits' registry."""
    listed = run(["python", "-m", "sglang_eagle3_audits", "--list", "--json"])
    if listed.returncode != 0:
        raise ValueError(f"cannot list the audits (python -m sglang_eagle3_audits --list --json):\n{listed.stderr}")
    return json.loads(listed.stdout)


def argv(command: list[str]) -> list[str]:
    return [sys.executable if word == "python" else word for word in command]


def run(command: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run(argv(command), cwd=REPO, capture_output=True, text=True)


def shown(command: list[str]) -> str:
    return " ".join(command)


def write(name: str, entry: dict) -> list[str]:
    """Run an entry's writers; the problems, if any."""
    if entry.get("write") is None:  # by hand: its check says whether it is current
        print(f"write {name}: by hand: {entry['how']}", file=sys.stderr)
        return []
    for command in entry["write"]:
        print(f"write {name}: {shown(command)}", file=sys.stderr)
        result = run(command)
        if result.returncode != 0:
            return [
                f"{name}: `{shown(command)}` failed ({result.returncode}):\n{(result.stdout + result.stderr)[-2000:]}"
            ]
        if "stdout" in entry:
            (REPO / entry["stdout"]).write_text(result.stdout)
    return []


def check(name: str, entry: dict) -> list[str]:
    """Run an entry's checks; the problems, if any (each says how to regenerate)."""
    how = (
        f"run `python nix/scripts/check-generated.py --write --only {name}`"
        if entry.get("write")
        else entry.get("how", "")
    )
    for command in entry["check"]:
        print(f"check {name}: {shown(command)}", file=sys.stderr)
        result = run(command)
        if result.returncode != 0:
            tail = (result.stdout + result.stderr).strip()[-2000:]
            return [f"{name}: `{shown(command)}` failed ({result.returncode}); {how}\n{tail}"]
        if "pytest" in command and ("skipped" in result.stdout or " passed" not in result.stdout):
            return [f"{name}: `{shown(command)}` did not run here (skipped):\n{result.stdout.strip()[-2000:]}"]
        if "stdout" in entry and result.stdout != (REPO / entry["stdout"]).read_text():
            return [f"{name}: {entry['stdout']} differs from `{shown(command)}`; {how}"]
    return []


def main(args: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--write", action="store_true", help="Run every writer first, then every check.")
    parser.add_argument("--quick", action="store_true", help="Leave out the entries marked slow.")
    parser.add_argument("--only", action="append", metavar="NAME", help="Only this entry (again for more).")
    parser.add_argument("--list", action="store_true", help="Print the register and exit.")
    parser.add_argument("--register", type=Path, default=REGISTER, help=argparse.SUPPRESS)  # the tests' own
    options = parser.parse_args(args)
    try:
        register = load(options.register)
    except ValueError as err:
        parser.error(str(err))
    unknown = [n for n in options.only or [] if n not in register]
    if unknown:
        parser.error(f"no entry {', '.join(unknown)} in {options.register.name} (entries: {', '.join(register)})")
    chosen = {
        name: entry
        for name, entry in register.items()
        if (options.only is None or name in options.only) and not (options.quick and entry.get("slow"))
    }
    if options.list:
        for name, entry in chosen.items():
            print(f"{name}: {', '.join(entry['files'])}")
            print(f"  generator: {entry['generator'] or 'by hand'}; inputs: {'; '.join(entry['inputs'])}")
            for command in entry.get("write") or []:
                print(f"  write: {shown(command)}" + (f" > {entry['stdout']}" if "stdout" in entry else ""))
            if entry.get("write") is None and "how" in entry:
                print(f"  write: {entry['how']}")
            for command in entry["check"]:
                print(f"  check: {shown(command)}")
        return 0
    problems = []
    for name, entry in chosen.items():
        problems += write(name, entry) if options.write else []
    for name, entry in chosen.items():
        found = check(name, entry)
        print(f"{'FAILED' if found else 'ok'} {name}")
        problems += found
    left_out = sorted(set(register) - set(chosen))
    if left_out:
        print(f"left out: {', '.join(left_out)}")
    if problems:
        print("\n" + "\n\n".join(problems), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
