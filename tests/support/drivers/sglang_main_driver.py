"""Run sglang_main's argument handling (``prepare``: the tree's start-up calls, its parser, the keys from files)
against one SGLang tree on CPU; print one JSON object.

Usage: python sglang_main_driver.py TREE < {"argv": [...], "environ": {...}}
A list of such requests gets a list of the objects, each prepared afresh: one import of the tree for several
command lines (a pod's leader and worker).

TREE holds sglang/. What stands in, and why:
- sglang/__init__.py is not run (the package is entered directly): 0.5.23's patches transformers 5.19 (its pin,
  which needs torch 2.14) at import, and the test environment has 0.5.9's transformers 4.57 and torch 2.9. The
  modules sglang_main imports (launch_server, srt/server_args.py, srt/plugins) import as they are.
- ServerArgs.__post_init__: 0.5.9's probes the accelerator ("No accelerator is available" here) and rewrites
  values for the hardware; 0.5.23's does nothing (resolution waits for run_server's resolve_once), so there it
  is SGLang's own. Parsing, from_cli_args and the start-up calls are SGLang's real code.
"""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path

ROOT = Path(sys.argv[1])
package = types.ModuleType("sglang")
package.__path__ = [str(ROOT / "sglang")]
sys.modules["sglang"] = package

order = types.ModuleType("eagle3_order")  # a test plugin appends "plugin" here when SGLang runs it
order.calls = []
sys.modules["eagle3_order"] = order

from sglang.srt import server_args as sglang_server_args  # noqa: E402
from sglang_eagle3.serving import credentials, sglang_main  # noqa: E402

if sglang_server_args.ServerArgs.__post_init__.__code__.co_code != (lambda self: None).__code__.co_code:
    sglang_server_args.ServerArgs.__post_init__ = lambda self: None  # 0.5.9: the accelerator probe, see above

parse = sglang_server_args.prepare_server_args


def recorded(argv):
    order.calls.append("parse")
    return parse(argv)


sglang_server_args.prepare_server_args = recorded


def fields(server_args) -> dict:
    names = getattr(type(server_args), "__struct_fields__", None) or server_args.__dataclass_fields__
    return {name: repr(getattr(server_args, name)) for name in names}


def main():
    given = json.load(sys.stdin)
    print(json.dumps([run(g) for g in given] if isinstance(given, list) else run(given)))


def run(given: dict) -> dict:
    order.calls.clear()
    startup = [f"{call.__module__}.{call.__name__}" for call in sglang_main.startup_calls()]
    with_keys = sglang_main.prepare(given["argv"], given["environ"])
    calls = list(order.calls)
    without = fields(parse(given["argv"]))
    keys = {f: getattr(with_keys, f) for f in ("api_key", "admin_api_key")}
    changed = sorted(name for name, value in fields(with_keys).items() if without[name] != value)
    launch_command = str(getattr(with_keys, "_launch_command", ""))
    secret = credentials.SERVER_SECRET_FIELDS  # every field but the secrets (keys, the TLS key's password, ...)
    parsed = {name: value for name, value in fields(with_keys).items() if name not in secret}
    return {"startup": startup, "order": calls, "keys": keys, "changed": changed,
            "launch_command": launch_command, "tp_size": with_keys.tp_size,
            "speculative_algorithm": with_keys.speculative_algorithm, "fields": parsed}  # fmt: skip


if __name__ == "__main__":
    main()
