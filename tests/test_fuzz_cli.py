"""Beyond the issue's list: every command, fed malformed paths, URLs and numbers, ends cleanly.

A table of nasty inputs (paths that are directories, empty, not UTF-8, FIFOs, missing, too
long, in an unknown user's home; URLs that do not parse; nan, inf, negative and huge
numbers) is run through every command that takes such a value, in-process with click's
test runner. A case passes with a non-zero exit status, a message, and no exception: the
commands' own handling, or the net below them (cli_common.TopLevelGroup) for a file the
system refused (OSError: bad input). The net's last resort, "unexpected ...", fails the
case. Then hypothesis throws arbitrary text at `--set`.
"""

from __future__ import annotations

import os
import string

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sglang_eagle3.cli import main
from sglang_eagle3.exit_status import ExitStatus
from sglang_eagle3.serving import settings as server_settings

NUMBERS = ["nan", "inf", "-inf", "-1", "0", "1e400", "99999999999999999999999999", "1.5", "abc", "", "0x10"]
URLS = ["http://[::1", ":abc", "http://127.0.0.1:99999", "http://127.0.0.1:-1", "http://exa mple.com:1", "https://",
        "ftp://127.0.0.1:1", "http://" + "a" * 300 + ":1", "http://127.0.0.1:1/v1", "//x:1", ""]  # fmt: skip
PATH_KINDS = ["missing", "directory", "empty", "not-utf8", "fifo", "dev-null", "unknown-home", "long", "newline"]


@pytest.fixture
def nasty_path(tmp_path):
    def make(kind: str) -> str:
        path = tmp_path / f"nasty-{kind}.json"
        if kind == "directory":
            path.mkdir(exist_ok=True)
        elif kind == "empty":
            path.write_bytes(b"")
        elif kind == "not-utf8":
            path.write_bytes(b'{"type": "run", "label": "\xff\xfe"}\n')
        elif kind == "fifo":
            if not path.exists():
                os.mkfifo(path)
        elif kind == "dev-null":
            return "/dev/null"
        elif kind == "unknown-home":
            return "~no-such-user-4711/file.json"
        elif kind == "long":
            return str(tmp_path / ("x" * 5000))
        elif kind == "newline":
            return str(tmp_path / "a\nb.json")
        return str(path)

    return make


def run(args: list[str], cwd, may_succeed: bool = False) -> None:
    runner = CliRunner(env={"SGLANG_EAGLE3_NVIDIA_SMI": "/nonexistent/nvidia-smi"})
    previous = os.getcwd()
    os.chdir(cwd)  # bench writes results/ below the working directory
    try:
        result = runner.invoke(main, args, catch_exceptions=True)
    finally:
        os.chdir(previous)
    shown = [a if len(a) < 80 else a[:40] + "..." for a in args]
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise AssertionError(f"{shown} raised {type(result.exception).__name__}: {str(result.exception)[:300]}")
    output = result.output[-2000:]
    allowed = (ExitStatus.CHECK_FAILED, ExitStatus.BAD_INPUT) + ((ExitStatus.OK,) if may_succeed else ())
    assert result.exit_code in allowed, (shown, result.exit_code, output)
    assert "Traceback" not in result.output and "unexpected" not in result.output, (shown, output)
    assert result.output.strip(), shown


PATH_COMMANDS = [
    ["probe", "--sglang", "{}"],
    ["patch", "verify", "--sglang", "{}"],
    ["patch", "apply", "--sglang", "{}"],
    ["settings", "show", "--config", "{}"],
    ["settings", "reference", "--write", "{}"],
    ["serve", "--dry-run", "--config", "{}"],
    ["serve", "--dry-run", "--sglang", "{}"],
    ["serve", "--dry-run", "--json", "--set", "api_key_file={}"],
    ["serve", "--dry-run", "--set", "admin_api_key_file={}"],
    ["serve", "--dry-run", "--set", "model_path={}"],
    ["serve", "--dry-run", "--profile", "baseline", "--set", "speculative_draft_model_path={}"],
    ["bench", "summary", "{}"],
    ["bench", "compare", "{}", "{}"],
    ["bench", "run", "--url", "http://127.0.0.1:1", "--output", "{}"],
    ["bench", "run", "--url", "http://127.0.0.1:1", "--api-key-file", "{}"],
    ["bench", "sweep", "--output-dir", "{}", "--steps", "3"],
]


@pytest.mark.parametrize("kind", PATH_KINDS)
@pytest.mark.parametrize("command", PATH_COMMANDS, ids=lambda c: " ".join(c[:3]))
def test_every_command_with_nasty_paths(tmp_path, nasty_path, command, kind):
    path = nasty_path(kind)
    run([part.replace("{}", path) for part in command], tmp_path)


# Each command with the numbers it accepts (a valid value succeeds; every other must be refused).
NUMBER_COMMANDS = [
    (["probe", "--sglang", "/nonexistent", "--compute-capability", "{}"], ()),
    (["probe", "--sglang", "/nonexistent", "--set", "tp_size={}"], ()),
    (["settings", "show", "--set", "tp_size={}"], ("99999999999999999999999999",)),
    (["settings", "show", "--set", "port={}"], ()),
    (["settings", "show", "--set", "mem_fraction_static={}"], ()),
    (["settings", "show", "--set", "ready_timeout={}"], ("1.5",)),
    (["settings", "show", "--set", "stop_timeout={}"], ("1.5",)),
    (["settings", "show", "--set", "speculative_num_steps={}"], ()),
    (["serve", "--dry-run", "--set", "context_length={}", "--set", "port=-3"], ()),
    (["bench", "run", "--url", "http://127.0.0.1:1", "--requests", "{}"], ()),
    (["bench", "run", "--url", "http://127.0.0.1:1", "--concurrency", "{}"], ()),
    (["bench", "run", "--url", "http://127.0.0.1:1", "--max-tokens", "{}"], ()),
    (["bench", "compare", "/nonexistent", "/nonexistent", "--threshold", "{}"], ()),
    (["bench", "compare", "/nonexistent", "/nonexistent", "--floor", "{}"], ()),
    (["bench", "sweep", "--steps", "{}"], ()),
    (["bench", "sweep", "--steps", "3", "--topk", "{}"], ()),
]


@pytest.mark.parametrize("number", NUMBERS)
@pytest.mark.parametrize("command, valid", NUMBER_COMMANDS, ids=lambda c: " ".join(c[-2:]) if c else "")
def test_every_command_with_nasty_numbers(tmp_path, command, valid, number):
    run([part.replace("{}", number) for part in command], tmp_path, may_succeed=number in valid)


@pytest.mark.parametrize("url", URLS)
@pytest.mark.parametrize("command", [["bench", "run", "--url", "{}"], ["bench", "compare", "{}", "{}"]])
def test_bench_with_nasty_urls(tmp_path, command, url):
    run([part.replace("{}", url) for part in command], tmp_path)


# -- hypothesis: arbitrary --set assignments -----------------------------------------------------------

FIELDS = sorted(server_settings.ServerSettings.model_fields) + ["api_key", "admin_api_key", "tp", ""]
VALUES = st.one_of(
    st.text(max_size=40),
    st.sampled_from(NUMBERS + ["true", "false", "null", "[]", "{}", '["--api-key", "x"]', '{"a": 1}', "\x00"]),
    st.integers().map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.lists(st.text(alphabet=string.printable, max_size=8), max_size=3).map(lambda xs: str(xs).replace("'", '"')),
)


@settings(max_examples=300, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(field=st.sampled_from(FIELDS), value=VALUES)
def test_any_assignment_is_settings_or_a_settings_error(field, value):
    try:
        loaded = server_settings.load(None, [f"{field}={value}"], environ={})
    except server_settings.SettingsError as err:
        message = str(err)
        assert message.strip()
        if field in ("api_key", "admin_api_key", "extra_args", "environment") and len(value) > 3:
            assert value not in message  # whatever was typed there may be a secret
    else:
        assert isinstance(loaded, server_settings.ServerSettings)
