"""Exit statuses: one enum, listed by `sglang-eagle3 --help`, used by every exit site."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from sglang_eagle3.exit_status import ExitStatus

PACKAGE = Path(__file__).resolve().parents[1] / "python" / "src" / "sglang_eagle3"


def test_help_lists_every_exit_status(run_cli):
    result = run_cli("--help")
    assert result.returncode == 0
    listed = dict(re.findall(r"^\s+(\d+)  (.+)$", result.stdout.split("Exit status:")[1], re.MULTILINE))
    assert {int(code) for code in listed} == {int(s) for s in ExitStatus}
    assert all(listed[str(int(s))] == s.meaning for s in ExitStatus)


def test_no_literal_exit_codes_in_the_package():
    """sys.exit / ctx.exit / exit_code = / the models errors only with an ExitStatus, never a bare number."""
    literal = []
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and ast.unparse(node.func) in ("sys.exit", "ctx.exit", "exit"):
                if node.args and isinstance(node.args[0], ast.Constant):
                    literal.append(f"{path.name}:{node.lineno}")
                if node.args and isinstance(node.args[0], ast.IfExp):
                    if any(isinstance(x, ast.Constant) for x in (node.args[0].body, node.args[0].orelse)):
                        literal.append(f"{path.name}:{node.lineno}")
            # The errors that carry their exit status (models): ModelsError(kind, message, status).
            if isinstance(node, ast.Call) and ast.unparse(node.func).split(".")[-1] in ("ModelsError", "Interrupted"):
                if any(isinstance(a, (ast.Constant, ast.BinOp)) and not isinstance(getattr(a, "value", 0), str)
                       for a in node.args):  # fmt: skip
                    literal.append(f"{path.name}:{node.lineno}")
            if isinstance(node, ast.Assign) and any(ast.unparse(t) == "exit_code" for t in node.targets):
                if isinstance(node.value, ast.Constant):
                    literal.append(f"{path.name}:{node.lineno}")
    assert literal == []


def test_bad_input_and_failed_checks_use_their_statuses(run_cli, tmp_path):
    assert run_cli("serve", "--dry-run", "--set", "tp_size=0").returncode == ExitStatus.BAD_INPUT
    assert run_cli("probe", "--target", str(tmp_path)).returncode == ExitStatus.BAD_INPUT
    assert run_cli("no-such-command").returncode == ExitStatus.BAD_INPUT  # click's usage errors agree


def test_readme_lists_the_same_exit_statuses():
    readme = (PACKAGE.parents[2] / "README.md").read_text()
    for status in ExitStatus:
        assert f"| {int(status)} | {status.meaning} |" in readme, status
