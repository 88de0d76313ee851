"""Beyond the issue's list: every command, fed malformed paths, URLs and numbers, ends cleanly.

A table of nasty inputs (paths that are directories, empty, not UTF-8, FIFOs, missing, too
long, in an unknown user's home, '' and blank, JSON and TOML nested deeper than Python's
recursion; URLs that do not parse; nan, inf, negative and huge numbers) is run through every
command that takes such a value, in-process with click's test runner: the path parameters are
every one the CLI defines (support/cli_catalog.py walks click's definitions) and every setting
that names a path, so a new option is covered without editing this test. A case passes with a
non-zero exit status, a message, and no exception: the commands' own handling, or the net below
them (cli_common.TopLevelGroup) for a file the system refused (OSError: bad input). The net's
last resort, "unexpected ...", fails the case. Then hypothesis throws arbitrary text at `--set`.
"""

from __future__ import annotations

import os
import string
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sglang_eagle3.cli import main
from sglang_eagle3.exit_status import ExitStatus
from sglang_eagle3.serving import settings as server_settings
from support import cli_catalog
from support.own_resources import missing_path, refused_port

NUMBERS = ["nan", "inf", "-inf", "-1", "0", "1e400", "99999999999999999999999999", "1.5", "abc", "", "0x10"]
URLS = ["http://[::1", ":abc", "http://127.0.0.1:99999", "http://127.0.0.1:-1", "http://exa mple.com:1", "https://",
        "ftp://127.0.0.1:1", "http://" + "a" * 300 + ":1", "{url}/v1", "//x:1", ""]  # fmt: skip
PATH_KINDS = ["missing", "directory", "empty", "not-utf8", "fifo", "dev-null", "unknown-home", "long", "newline",
              "empty-string", "blank", "deep-json", "deep-toml"]  # fmt: skip


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
        elif kind == "empty-string":
            return ""  # Path("") is the working directory: never read as one
        elif kind == "blank":
            return "  "
        elif kind == "deep-json":  # nested deeper than Python's recursion: a RecursionError was exit 70
            path.write_text("[" * 100_000 + "]" * 100_000)
        elif kind == "deep-toml":
            path = path.with_suffix(".toml")
            path.write_text("a = " + "[" * 100_000 + "]" * 100_000)
        return str(path)

    return make


@pytest.fixture
def places(tmp_path):
    """What the commands' lines name: a URL nothing answers (a port this test holds, never listened on) and a path
    nothing created, both the test's own (a fixed port or /nonexistent could be another job's)."""
    with refused_port() as port:
        yield {"url": f"http://127.0.0.1:{port}", "missing": str(missing_path(tmp_path))}


def run(args: list[str], cwd, may_succeed: bool = False) -> str:
    runner = CliRunner(env={"SGLANG_EAGLE3_NVIDIA_SMI": str(missing_path(Path(cwd), "nvidia-smi"))})
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
    return result.output


COMMANDS = cli_catalog.leaf_commands()
# Every parameter of every command that names a path (click's definitions), and every setting that does (the
# settings' own names: a key's file, a model's directory), given to the commands that take settings.
PATH_PARAMETERS = [(words, p.name) for words, c in COMMANDS.items() for p in c.params if cli_catalog.is_path(p)]
PATH_SETTINGS = [name for name in server_settings.ServerSettings.model_fields if name.endswith(("_file", "_path"))]


def filled(words: tuple[str, ...], skip: set[str], tmp_path, places) -> list[str]:
    results = tmp_path / "results.jsonl"
    results.write_text('{"type": "run", "label": "x"}\n')
    values = {
        "url": [places["url"]],
        "specs": ["example/tiny"],
        "baseline": [str(results)],
        "eagle3": [str(results)],
        "a_program": ["false"],
        "b_program": ["false"],
        "sglang": [places["missing"]],
    }
    return cli_catalog.required_args(COMMANDS[words], values, skip, tmp_path)  # fmt: skip


@pytest.mark.parametrize("kind", PATH_KINDS)
@pytest.mark.parametrize("words, name", PATH_PARAMETERS, ids=lambda x: " ".join(x) if isinstance(x, tuple) else x)
def test_every_path_parameter_with_nasty_paths(tmp_path, nasty_path, places, words, name, kind):
    param = next(p for p in COMMANDS[words].params if p.name == name)
    args = [*words, *cli_catalog.given(param, nasty_path(kind)), *filled(words, {name}, tmp_path, places)]
    output = run(args, tmp_path)
    if kind in ("empty-string", "blank"):  # never the working directory
        assert "is empty" in output, (args, output[-1000:])


@pytest.mark.parametrize("kind", PATH_KINDS)
@pytest.mark.parametrize("name", PATH_SETTINGS)
@pytest.mark.parametrize("command", [["settings", "show"], ["serve", "--dry-run"], ["serve", "--dry-run", "--json"]])
def test_every_path_setting_with_nasty_paths(tmp_path, nasty_path, command, name, kind):
    args = [*command, "--set", f"{name}={nasty_path(kind)}"]
    refused = kind in ("empty-string", "blank")  # '' is never the working directory, in any setting either
    # settings show reads no file a setting names; a model path that is no directory may be a hub id
    used = command != ["settings", "show"] and not name.endswith("model_path")
    output = run(args, tmp_path, may_succeed=not refused and (not used or kind == "unknown-home"))
    if refused:
        assert any(s in output for s in ("is empty", "white space", "at least 1 character")), (args, output[-1000:])


def test_every_path_parameter_is_covered():
    """The generated list holds the parameters the issues named: a walk that broke would test nothing."""
    names = {name for _, name in PATH_PARAMETERS}
    assert {"config", "lock_file", "directory", "output", "api_key_file", "token_file", "results", "baseline",
            "sglang", "output_dir", "series_dir", "write", "drafts"} <= names  # fmt: skip
    assert {"api_key_file", "model_path", "speculative_draft_model_path"} <= set(PATH_SETTINGS)


# Each command with the numbers it accepts (a valid value succeeds; every other must be refused).
NUMBER_COMMANDS = [
    (["probe", "--sglang", "{missing}", "--compute-capability", "{}"], ()),
    (["probe", "--sglang", "{missing}", "--set", "tp_size={}"], ()),
    (["settings", "show", "--set", "tp_size={}"], ("99999999999999999999999999",)),
    (["settings", "show", "--set", "port={}"], ()),
    (["settings", "show", "--set", "mem_fraction_static={}"], ()),
    (["settings", "show", "--set", "ready_timeout={}"], ("1.5",)),
    (["settings", "show", "--set", "stop_timeout={}"], ("1.5",)),
    (["settings", "show", "--set", "speculative_num_steps={}"], ()),
    (["serve", "--dry-run", "--set", "context_length={}", "--set", "port=-3"], ()),
    (["bench", "run", "--url", "{url}", "--requests", "{}"], ()),
    (["bench", "run", "--url", "{url}", "--concurrency", "{}"], ()),
    (["bench", "run", "--url", "{url}", "--max-tokens", "{}"], ()),
    (["bench", "compare", "{missing}", "{missing}", "--threshold", "{}"], ()),
    (["bench", "compare", "{missing}", "{missing}", "--floor", "{}"], ()),
    (["bench", "sweep", "--steps", "{}"], ()),
    (["bench", "sweep", "--steps", "3", "--topk", "{}"], ()),
]


@pytest.mark.parametrize("number", NUMBERS)
@pytest.mark.parametrize("command, valid", NUMBER_COMMANDS, ids=lambda c: " ".join(c[-2:]) if c else "")
def test_every_command_with_nasty_numbers(tmp_path, places, command, valid, number):
    args = [part.replace("{url}", places["url"]).replace("{missing}", places["missing"]) for part in command]
    run([a.replace("{}", number) for a in args], tmp_path, may_succeed=number in valid)


@pytest.mark.parametrize("url", URLS)
@pytest.mark.parametrize("command", [["bench", "run", "--url", "{}"], ["bench", "compare", "{}", "{}"]])
def test_bench_with_nasty_urls(tmp_path, places, command, url):
    run([part.replace("{}", url.replace("{url}", places["url"])) for part in command], tmp_path)


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
