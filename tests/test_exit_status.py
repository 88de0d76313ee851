"""Exit statuses: one enum, listed by `sglang-eagle3 --help`, used by every exit site."""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import pytest
from click.testing import CliRunner
from sglang_eagle3.cli import main
from sglang_eagle3.cli_common import TRACEBACK_ENV
from sglang_eagle3.errors import Eagle3Error
from sglang_eagle3.exit_status import ExitStatus
from sglang_eagle3.models import ModelsError
from sglang_eagle3.serving import settings as server_settings

PACKAGE = Path(__file__).resolve().parents[1] / "python" / "src" / "sglang_eagle3"


def test_help_lists_every_exit_status(run_cli):
    result = run_cli("--help")
    assert result.returncode == 0
    listed = dict(re.findall(r"^\s+(\d+)  (.+)$", result.stdout.split("Exit status:")[1], re.MULTILINE))
    assert {int(code) for code in listed} == {int(s) for s in ExitStatus}
    assert all(listed[str(int(s))] == s.meaning for s in ExitStatus)


# Calls that take an exit status: exits, the models' old _finish, and the errors that carry one.
STATUS_TAKERS = re.compile(r"(^|\.)(exit|_exit|_finish|report)$|(Error|Interrupted|Failed|BadInput|NotReady)$")


def _values(expr: ast.expr):
    """What an argument can evaluate to, through `a if c else b` and `a or b`, however nested."""
    if isinstance(expr, ast.IfExp):
        yield from _values(expr.body)
        yield from _values(expr.orelse)
    elif isinstance(expr, ast.BoolOp):
        for value in expr.values:
            yield from _values(value)
    else:
        yield expr


def _is_number(expr: ast.expr) -> bool:
    if isinstance(expr, ast.UnaryOp):
        return _is_number(expr.operand)
    if isinstance(expr, ast.BinOp):
        return _is_number(expr.left) or _is_number(expr.right)
    return isinstance(expr, ast.Constant) and type(expr.value) in (int, float)


def literal_exit_codes(source: str, name: str = "<source>") -> list[str]:
    """Where a bare number is given as an exit status (any argument of an exit, or of an error)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and STATUS_TAKERS.search(ast.unparse(node.func)):
            if any(_is_number(v) for a in [*node.args, *(k.value for k in node.keywords)] for v in _values(a)):
                found.append(f"{name}:{node.lineno}")
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(ast.unparse(t).split(".")[-1] in ("exit_code", "status", "code") for t in targets):
                if any(_is_number(v) for v in _values(node.value)):
                    found.append(f"{name}:{node.lineno}")
    return found


def test_no_literal_exit_codes_in_the_package():
    """sys.exit / ctx.exit / os._exit / an error's status only with an ExitStatus, never a bare number."""
    literal = [
        hit
        for path in PACKAGE.rglob("*.py")
        for hit in literal_exit_codes(path.read_text(), str(path.relative_to(PACKAGE)))
    ]
    assert literal == []


@pytest.mark.parametrize(
    "shape",
    [
        "sys.exit(1)",
        "ctx.exit(0 if ok else 1)",
        "os._exit(130)",
        # The call shape the first version of this check missed (the models commands passed it):
        '_finish("fetch", as_json, payload, error, None if error else (0 if ok else 1))',
        '_finish("verify", as_json, payload, None, 0 if ok else 1)',
        'ModelsError("bad_lock", "message", 2)',
        'raise CheckFailed("message", status=1)',
        "status = 1",
        "exit_code = 2",
    ],
)
def test_the_literal_check_sees_every_call_shape(shape):
    assert literal_exit_codes(shape) != []


def test_the_literal_check_lets_statuses_and_messages_through():
    ok = """
sys.exit(ExitStatus.OK if ok else ExitStatus.CHECK_FAILED)
raise ModelsError("io_error", f"{len(files)} files: {1 + 2}", ExitStatus.BAD_INPUT)
_finish(as_json, result.to_dict(), result.error)
"""
    assert literal_exit_codes(ok) == []


def test_a_status_is_an_exit_status_never_a_number():
    with pytest.raises(TypeError):
        Eagle3Error("message", 1)
    with pytest.raises(TypeError):
        ModelsError("kind", "message", 2)
    assert ModelsError("kind", "message", ExitStatus.BAD_INPUT).status is ExitStatus.BAD_INPUT


# Exceptions of the package that are not failures a command reports, and why.
NOT_FAILURES = {
    "sglang_eagle3.errors.Terminated": "SIGTERM, a BaseException like KeyboardInterrupt; the top-level group "
    "reports it with ExitStatus.TERMINATED",
    "sglang_eagle3.serving.launcher._StopRequested": "control flow inside launcher.serve(); never leaves it",
    "sglang_eagle3.models.fetch.Interrupted": "a signal, a BaseException like KeyboardInterrupt; the CLI "
    "turns it into an errors.Interrupted",
    "sglang_eagle3.judging.sglang_validation_main.ParseError": "SGLang's parser refusing the argv, inside the "
    "subprocess that runs its validation; it becomes that run's JSON outcome, never an exit",
    "sglang_eagle3.judging.sglang_validation_main.MissingFact": "a GPU fact nvidia-smi did not report, asked for "
    "inside that subprocess; it becomes that run's JSON outcome, never an exit",
}


def _package_exceptions():
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        module = importlib.import_module(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
        for value in vars(module).values():
            if isinstance(value, type) and issubclass(value, BaseException) and value.__module__ == module.__name__:
                yield f"{module.__name__}.{value.__qualname__}", value


def test_every_failure_derives_from_one_base_carrying_its_status():
    classes = dict(_package_exceptions())
    assert len(classes) > 10  # the walk found them
    outside = sorted(name for name, cls in classes.items() if not issubclass(cls, Eagle3Error))
    assert outside == sorted(NOT_FAILURES)
    assert all(isinstance(cls.status, ExitStatus) for cls in classes.values() if issubclass(cls, Eagle3Error))


def test_an_unexpected_error_has_its_own_status(monkeypatch):
    """A bug is not 'a check said no': exit 70 (sysexits' EX_SOFTWARE), not 1, with one line and no traceback."""

    def broken():
        raise RuntimeError("a bug")

    monkeypatch.setattr(server_settings, "json_schema", broken)
    monkeypatch.delenv(TRACEBACK_ENV, raising=False)
    result = CliRunner().invoke(main, ["settings", "schema"])
    assert result.exit_code == ExitStatus.UNEXPECTED == 70
    assert "unexpected RuntimeError: a bug" in result.output and "Traceback" not in result.output


def test_errors_of_every_layer_end_in_their_status_and_message(monkeypatch):
    """The top-level group reports an Eagle3Error raised anywhere below it: its message, its status."""
    for status in (ExitStatus.CHECK_FAILED, ExitStatus.BAD_INPUT, ExitStatus.INTERRUPTED, ExitStatus.NOT_READY):

        def failing(status=status):
            raise Eagle3Error(f"what went wrong ({status.name})", status)

        monkeypatch.setattr(server_settings, "json_schema", failing)
        result = CliRunner().invoke(main, ["settings", "schema"])
        assert result.exit_code == status
        assert f"Error: what went wrong ({status.name})" in result.output and "Traceback" not in result.output


def test_bad_input_and_failed_checks_use_their_statuses(run_cli, tmp_path):
    assert run_cli("serve", "--dry-run", "--set", "tp_size=0").returncode == ExitStatus.BAD_INPUT
    assert run_cli("probe", "--sglang", str(tmp_path)).returncode == ExitStatus.BAD_INPUT
    assert run_cli("no-such-command").returncode == ExitStatus.BAD_INPUT  # click's usage errors agree
    result = run_cli("patch", "verify", "--sglang", str(tmp_path))  # an SGLangNotFound from source/: its own status
    assert result.returncode == ExitStatus.BAD_INPUT and "Traceback" not in result.stderr


def test_readme_lists_the_same_exit_statuses():
    readme = (PACKAGE.parents[2] / "README.md").read_text()
    for status in ExitStatus:
        assert f"| {int(status)} | {status.meaning} |" in readme, status
