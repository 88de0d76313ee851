"""What the audits cannot resolve, counted: docs/nix.md's table of what each audit's data lists as not resolved,
per stack, made from that data (as the other audits wrote it) rather than kept by hand.

Every audit follows a name to the constants it can hold and lists what it still cannot resolve, with its site, in
its data; this audit reads no wheel, only those lists. tests/test_name_following.py counts them its own way and
checks the page too.
"""

from __future__ import annotations

from sglang_eagle3.source import secret_exits

from .base import Audit, Docs
from .closure import REPO, Closure, read_json

# (key, the audit and where its data lists it, what it lists), in the table's order.
ROWS = (
    ("gates", "start-up gates (`startup-gates.json`, each package's `unresolved`)",
     "gates that read a name not resolved"),
    ("dynamic", "run-time lookups (`runtime-lookups.json`)",
     "programs and libraries named by an expression: `<dynamic>` lookups, each with its disposition"),
    ("env", "run-time lookups (each package's `unresolved`)", "environment variables read by a name not resolved"),
    ("rules", "SGLang's rules (`sglang-rules.json` `unresolved`)",
     "a setting's name not resolved (setattr, a returned dict's key, `**kwargs`)"),
    ("secrets", "secret exits (`patches/sglang-<version>/secret-exits.json` `unresolved`)",
     "a server argument read or set by a name not resolved"),
    ("metadata", "metadata reads (`metadata.json` `unresolved`)", "a distribution or module named by an expression"),
)  # fmt: skip


def counts(closure: Closure) -> dict[str, int]:
    """What each audit's data lists as not resolved, for one stack."""

    def data(name: str) -> dict:
        return read_json(closure.data / name, f"run python -m sglang_eagle3_audits --write --stack {closure.version}")

    gates, lookups = data("startup-gates.json"), data("runtime-lookups.json")
    exits = read_json(REPO / closure.stack.series / secret_exits.DATA_FILE, "each stack's series keeps its exits there")
    return {
        "gates": sum(len(p.get("unresolved", [])) for p in gates["packages"].values()),
        "dynamic": sum(1 for p in lookups["packages"].values() for key in p["lookups"] if "<dynamic>" in key),
        "env": sum(len(p.get("unresolved", {})) for p in lookups["packages"].values()),
        "rules": len(data("sglang-rules.json")["unresolved"]),
        "secrets": len(exits["unresolved"]),
        "metadata": len(data("metadata.json")["unresolved"]),
    }


class UnresolvedCounts(Audit):
    name = "unresolved-counts"
    inputs = ("each stack's startup-gates.json, runtime-lookups.json, sglang-rules.json, metadata.json",
              "each stack's patches/sglang-<version>/secret-exits.json")  # fmt: skip
    docs = Docs("docs/nix.md", "unresolved-counts")
    slow = False  # reads the data as written, no wheel

    def scan(self, closure: Closure) -> dict:
        return counts(closure)

    def committed(self, closure: Closure) -> dict:
        return counts(closure)

    def markdown(self, results: dict[Closure, dict]) -> str:
        versions = [c.version for c in results]
        lines = [f"| audit | listed | {' | '.join(versions)} |", "|---|---|" + "---|" * len(versions)]
        lines += [f"| {audit} | {what} | {' | '.join(str(r[key]) for r in results.values())} |"
                  for key, audit, what in ROWS]  # fmt: skip
        return "\n".join(lines)


AUDIT = UnresolvedCounts()
