"""A secret planted in any channel a user gives a value by never comes out: not in any output, file written or log.

Every channel is generated from its definition, so a new setting, option, variable or file is covered without
editing this test:

- every setting (the settings schema), given by --set, by the settings file (JSON and TOML) and by
  SGLANG_EAGLE3_<FIELD>, to every command that takes settings (the commands with --set); once with the secret in
  every field (invalid where a field is no text: the messages about it), once where each field takes it (the
  outputs that show a setting: the dry run's command line, `settings show`, preflight's findings);
- every value of `environment`, under a name that says it is secret and under names that do not;
- every environment variable the tools read, found by an ast scan of every ``os.environ`` / ``os.getenv`` read in
  this package and in huggingface_hub (which reads the hub's address), plus the ones of the programs and clients
  they run: pip's URL options (from pip's own option table) and the proxy variables every HTTP client reads.
  A URL or endpoint variable gets a URL with the secret as its password, any other the secret as its value; each
  URL variable alone, against the commands that go out on the network;
- every path and file argument of sglang-eagle3 (its click definitions) and kubernetes/generate.py (its argparse
  definitions): the secret as the path, and a file holding the secret (every file the tools read: settings,
  locks, results, keys, patches) in JSON, JSON Lines and plain text at once;
- a key's file (the settings' *_file fields): the secret as the key in it.

Each run is the real program in a fresh sandbox (its own HOME, cache, working directory; the GPUs' nvidia-smi
missing, so nothing is started; every server and the hub on a refused loopback port). The secret is searched in
stdout, stderr (the logs: the hub client's included) and every file the run created or changed, by its whole and
by parts of its random middle (a secret cut short still shows one). A traceback or an unexpected error fails too.
"""

from __future__ import annotations

import ast
import functools
import json
import os
import secrets
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import click
import huggingface_hub
import pytest
import sglang_eagle3
from conftest import REPO
from sglang_eagle3.exit_status import ExitStatus
from sglang_eagle3.serving import settings as server_settings
from sglang_eagle3.serving.credentials import SECRET_ARGS
from support import cli_catalog
from support.own_resources import refused_port

RANDOM = secrets.token_hex(12)
SECRET = f"sk-planted{RANDOM}"  # a key as issuers hand them out: a prefix, then random characters
PARTS = (SECRET, RANDOM[:10], RANDOM[-10:])  # a secret cut short still shows one of these
GENERATE = REPO / "kubernetes" / "generate.py"
EXAMPLE_LOCK = REPO / "nix" / "tests" / "example-draft.lock.json"


def found_in(data: bytes | str) -> bool:
    text = data.decode(errors="replace") if isinstance(data, bytes) else data
    return any(part in text for part in PARTS)


# -- the channels, from their definitions ------------------------------------------------------------------------


COMMANDS = cli_catalog.leaf_commands()
takes, is_path = cli_catalog.takes, cli_catalog.is_path


def environ_reads(root: Path) -> dict[str, str | None]:
    """Every environment variable the Python files under ``root`` read by a constant name, with its default when
    the read gives one (``os.environ.get("X", "http://...")``): name -> default."""
    found: dict[str, str | None] = {}
    for path in root.rglob("*.py"):
        tree = ast.parse(path.read_bytes())
        constants = {t.id: n.value.value for n in ast.walk(tree) if isinstance(n, ast.Assign)
                     and isinstance(n.value, ast.Constant) and isinstance(n.value.value, str)
                     for t in n.targets if isinstance(t, ast.Name)}  # fmt: skip
        for node in ast.walk(tree):
            key, default = None, None
            if isinstance(node, ast.Call) and node.args and ast.unparse(node.func).endswith(("environ.get", "getenv")):
                key, default = node.args[0], node.args[1] if len(node.args) > 1 else None
            elif isinstance(node, ast.Subscript) and ast.unparse(node.value).endswith("environ"):
                key = node.slice
            name = key.value if isinstance(key, ast.Constant) else constants.get(key.id) if isinstance(key, ast.Name) \
                else None  # fmt: skip
            if isinstance(name, str):
                given = default.value if isinstance(default, ast.Constant) else None
                found[name] = given if isinstance(given, str) else found.get(name)
    return found


def pip_url_variables() -> set[str]:
    """pip's options that take a URL (its own option table), as the variables pip reads them from: PIP_<NAME>."""
    import optparse

    from pip._internal.cli import cmdoptions

    names = set()
    for value in vars(cmdoptions).values():
        try:
            option = value() if callable(value) and not isinstance(value, type) else None
        except TypeError:  # needs arguments: not an option's maker
            continue
        if isinstance(option, optparse.Option) and (option.metavar == "URL" or "proxy" in (option.dest or "")):
            # pip reads --extra-index-url from PIP_EXTRA_INDEX_URL: each long name, upper case, - as _
            names |= {"PIP_" + name[2:].upper().replace("-", "_") for name in option._long_opts}
    return names


# urllib.request.getproxies_environment reads every <scheme>_proxy variable, in both cases; requests, httpx and pip
# go through it (or read the same names).
PROXY_VARIABLES = {f"{scheme}_proxy" for scheme in ("http", "https", "all")}
PROXY_VARIABLES |= {name.upper() for name in PROXY_VARIABLES}
# What the tools themselves need to run here (not channels a user plants a secret in for this test).
HARNESS = {"HOME", "PATH", "XDG_CACHE_HOME", "SGLANG_EAGLE3_NVIDIA_SMI", "SGLANG_EAGLE3_TRACEBACK", "HF_HUB_OFFLINE",
           "TRANSFORMERS_OFFLINE", "PIP_RETRIES", "PIP_TIMEOUT", "PIP_NO_INPUT", "PIP_CONFIG_FILE",
           "PYTHONPATH"}  # fmt: skip


def is_url_variable(name: str, default: str | None) -> bool:
    return any(word in name.upper() for word in ("URL", "URI", "ENDPOINT", "PROXY")) or str(default).startswith(
        ("http://", "https://")
    )


@functools.cache
def variables() -> tuple[list[str], list[str]]:
    """(the URL variables, every other variable the tools read), scanned once a worker, when a test first asks (at
    collection every worker would scan, about 1 s each)."""
    ours = environ_reads(Path(sglang_eagle3.__file__).parent)
    hub = environ_reads(Path(huggingface_hub.__file__).parent)
    urls = sorted({n for n, d in {**ours, **hub}.items() if is_url_variable(n, d)} | pip_url_variables()
                  | PROXY_VARIABLES)  # fmt: skip
    return urls, sorted((set(ours) | {n for n in hub if n.startswith("HF_")}) - set(urls) - HARNESS)


def test_the_scans_find_the_channels_they_must():
    """The generated lists hold what the issue found and what the tools surely read: a scan that broke would
    silently plant nothing."""
    urls, others = variables()
    assert {"HF_ENDPOINT", "PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "HTTPS_PROXY"} <= set(urls)
    assert {"CREDENTIALS_DIRECTORY", "SGLANG_EAGLE3_PATCHES"} <= set(others)
    assert {("settings", "show"), ("serve",), ("models", "lock"), ("bench", "compare")} <= set(COMMANDS)
    paths = {p.name for command in COMMANDS.values() for p in command.params if is_path(p)}
    assert {"api_key_file", "token_file", "config", "lock_file", "directory", "output", "sglang"} <= paths
    assert len(server_settings.json_schema()["properties"]) == len(server_settings.ServerSettings.model_fields)


# -- the sandbox ---------------------------------------------------------------------------------------------------


class Sandbox:
    """A fresh home, cache, working directory and inputs for one run; what the run wrote is what changed here."""

    def __init__(self, root: Path, port: int):
        self.root, self.port = root, port
        for name in ("home", "cache", "work", "inputs"):
            (root / name).mkdir(parents=True)
        self.inputs = root / "inputs"
        self.url = f"http://127.0.0.1:{port}"
        base = {k: v for k, v in os.environ.items() if not k.startswith(("SGLANG_EAGLE3_", "EAGLE3_TESTS_", "HF_"))
                and k not in variables()[0] and k != "CREDENTIALS_DIRECTORY"}  # fmt: skip
        self.env = {**base, "HOME": str(root / "home"), "XDG_CACHE_HOME": str(root / "cache"),
                    "SGLANG_EAGLE3_NVIDIA_SMI": str(root / "no-nvidia-smi"), "HF_ENDPOINT": self.url,
                    # pip (a release version's wheel) never leaves loopback either: its index is this refused port
                    "PIP_INDEX_URL": self.url, "PIP_CONFIG_FILE": os.devnull, "PIP_RETRIES": "0", "PIP_TIMEOUT": "2",
                    "PIP_NO_INPUT": "1"}  # fmt: skip

    def file(self, name: str, text: str, mode: int = 0o600) -> Path:
        path = self.inputs / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        path.chmod(mode)
        return path

    def snapshot(self) -> dict[Path, tuple[int, int]]:
        return {p: (p.stat().st_size, p.stat().st_mtime_ns) for p in self.root.rglob("*") if p.is_file()}

    def run(self, argv: list[str], env: dict[str, str] | None = None, path_channel: bool = False,
            python: bool = False):  # fmt: skip
        """Run the program (``python``: the interpreter, given ``argv``); the places the secret came out, and what
        it said."""
        before = self.snapshot()
        program = [sys.executable] if python or argv[:1] == [str(GENERATE)] else [sys.executable, "-m", "sglang_eagle3"]
        result = subprocess.run([*program, *argv], capture_output=True, env={**self.env, **(env or {})},
                                cwd=self.root / "work", timeout=300)  # fmt: skip
        leaks = [name for name, text in (("stdout", result.stdout), ("stderr", result.stderr)) if found_in(text)]
        for path, stamp in self.snapshot().items():
            if before.get(path) == stamp:
                continue  # not written by this run
            with open(path, "rb") as f:
                if found_in(f.read(50_000_000)):
                    leaks.append(f"the file {path}")
            if not path_channel and found_in(str(path.relative_to(self.root))):
                leaks.append(f"the name of {path}")
        said = (result.stdout + result.stderr).decode(errors="replace")
        if "Traceback" in said or result.returncode == ExitStatus.UNEXPECTED:
            leaks.append(f"a traceback or unexpected error (exit {result.returncode}): {said[-1500:]}")
        return leaks, said


@pytest.fixture
def sandbox(tmp_path):
    with refused_port() as port:
        yield Sandbox(tmp_path, port)


def fill(command_path: tuple[str, ...], command: click.Command, sandbox: Sandbox, given: set[str]) -> list[str]:
    """Values for the command's required parameters the run does not plant: benign ones of each kind (a URL nothing
    answers, a lock, results files, a program), so the run gets as far as it can; by type for any other."""
    results = sandbox.file("results.jsonl", json.dumps({"type": "run", "label": "base"}) + "\n")
    program = f"{sys.executable} -m sglang_eagle3"
    by_name = {
        "url": [sandbox.url], "specs": ["example/tiny"], "output": [str(sandbox.root / "out" / "x.lock.json")],
        "lock_file": [str(EXAMPLE_LOCK)], "directory": [str(sandbox.root / "model")],
        "baseline": [str(results)], "eagle3": [str(results)], "sglang": [str(sandbox.root / "no-sglang")],
        "a_program": [program], "b_program": [program],
    }  # fmt: skip
    return cli_catalog.required_args(command, by_name, given, sandbox.root)


def invocations(command_path, command, sandbox, planted: list[str], given: set[str]) -> list[list[str]]:
    """The command with ``planted`` arguments and its required ones, plus its --json (and serve's --dry-run)
    variants: each output a command has."""
    base = [*command_path, *planted, *fill(command_path, command, sandbox, given)]
    variants = [base]
    if takes(command, "dry_run"):
        variants.append([*base, "--dry-run"])
    if takes(command, "as_json"):
        variants.append([*variants[-1], "--json"])
    return variants


def run_all(sandbox: Sandbox, runs: list[tuple[list[str], dict, bool]]) -> list[str]:
    """Every run, three at a time; the leaks found, each with the run that leaked."""
    with ThreadPoolExecutor(3) as pool:
        outcomes = list(pool.map(lambda r: (r, sandbox.run(*r)[0]), runs))
    assert outcomes, "no run was planned: a channel's generator found nothing"
    return [f"{' '.join(argv)[:200]} {sorted(env)[:3]}: {leak}" for (argv, env, _), leaks in outcomes for leak in leaks]


# -- the settings --------------------------------------------------------------------------------------------------

SETTINGS_COMMANDS = {path: c for path, c in COMMANDS.items() if takes(c, "assignments")}
PROPERTIES = server_settings.json_schema()["properties"]


def everywhere(sandbox: Sandbox) -> dict[str, object]:
    """The secret in every setting, whatever its type (the messages about values a field refuses)."""
    return {name: {"extra_args": [SECRET], "environment": {"DB_PASS": SECRET}}.get(name, SECRET) for name in PROPERTIES}


def environment_values() -> dict[str, str]:
    """`environment` with the secret under names of every kind: secret-looking, plain, and as a URL's password."""
    names = ["DB_PASS", "PASSWD", "AUTH", "CREDENTIAL", "MY_SETTING", "NCCL_DEBUG", "X"]
    values = {name: SECRET for name in names}
    values["MIRROR_URL"] = f"https://user:{SECRET}@mirror.example/simple"
    return values


def where_each_fits(sandbox: Sandbox) -> dict[str, object]:
    """The secret in every setting that takes it as a valid value: as it is, as a host:port, or (a key's file) as
    the name of a private file that holds it; fields that take no text keep their defaults."""
    key_file = sandbox.file(SECRET, SECRET + "\n")
    chosen: dict[str, object] = {"environment": environment_values(), "extra_args": ["--log-level", SECRET]}
    for name in PROPERTIES:
        if name in chosen:
            continue
        for candidate in (SECRET, f"{SECRET}:5000", str(key_file)):
            try:
                server_settings.load(None, [f"{name}={candidate}"], environ={})
            except server_settings.SettingsError:
                continue
            chosen[name] = candidate
            break
    server_settings.load(None, [f"{k}={json.dumps(v) if not isinstance(v, str) else v}" for k, v in chosen.items()],
                         environ={})  # together, too  # fmt: skip
    return chosen


def as_set(values: dict) -> list[str]:
    return [a for k, v in values.items() for a in ("--set", f"{k}={v if isinstance(v, str) else json.dumps(v)}")]


def as_toml(values: dict) -> str:
    lines = [f"{k} = {json.dumps(v)}" for k, v in values.items() if not isinstance(v, dict)]
    tables = [f"[{k}]\n" + "".join(f"{n} = {json.dumps(x)}\n" for n, x in v.items()) for k, v in values.items()
              if isinstance(v, dict)]  # fmt: skip
    return "\n".join(lines) + "\n" + "\n".join(tables)


def as_environment(values: dict) -> dict[str, str]:
    return {f"SGLANG_EAGLE3_{k.upper()}": v if isinstance(v, str) else json.dumps(v) for k, v in values.items()}


def test_a_secret_in_any_setting_by_any_source_never_comes_out(sandbox):
    runs = []
    for values in (everywhere(sandbox), where_each_fits(sandbox)):
        config_json = sandbox.file(f"settings-{len(runs)}.json", json.dumps(values))
        config_toml = sandbox.file(f"settings-{len(runs)}.toml", as_toml(values))
        for path, command in SETTINGS_COMMANDS.items():
            for planted, env in ((as_set(values), {}), (["--config", str(config_json)], {}),
                                 (["--config", str(config_toml)], {}), ([], as_environment(values))):  # fmt: skip
                runs += [(argv, env, False) for argv in invocations(path, command, sandbox, planted, {"assignments"})]
    assert run_all(sandbox, runs) == []
    # The values got where they are shown: hidden there, not left out before they were read.
    shown = json.loads(sandbox.run(["settings", "show", *as_set(where_each_fits(sandbox))])[1].split("\n\n")[0])
    assert shown["model_path"] == shown["served_model_name"] == "***" and shown["dist_init_addr"] == "***:5000"
    dry_run = sandbox.run(["serve", "--dry-run", *as_set(where_each_fits(sandbox))])[1]
    assert "--model-path '***' " in dry_run and "--served-model-name '***' " in dry_run, dry_run[-2000:]


def test_a_key_in_a_key_files_place_is_refused_by_every_command_without_being_repeated(sandbox):
    """The issue's case: `serve --dry-run --set api_key_file=sk-...` said "api_key_file sk-... does not exist";
    `settings show` printed it and exited 0. Every command that takes settings refuses it, exit 2, unrepeated."""
    for path, command in SETTINGS_COMMANDS.items():
        for secret in SECRET_ARGS:
            filled = fill(path, command, sandbox, {"assignments"})
            leaks, said = sandbox.run([*path, "--set", f"{secret.setting}={SECRET}", *filled])
            assert leaks == [], leaks
            assert "looks like the secret itself rather than a path (it is not shown)" in said, (path, said[-500:])


def test_environment_values_are_masked_by_more_than_their_names(sandbox):
    """DB_PASS, PASSWD, AUTH and CREDENTIAL showed in clear; a key under a plain name, and a URL's password, too."""
    values = json.dumps(environment_values())
    for argv in (["settings", "show"], ["serve", "--dry-run"], ["serve", "--dry-run", "--json"]):
        leaks, said = sandbox.run([*argv, "--set", f"environment={values}"])
        assert leaks == [] and "***" in said, (argv, leaks, said[-800:])
    shown = json.loads(sandbox.run(["settings", "show", "--set", f"environment={values}"])[1].split("\n\n")[0])
    assert shown["environment"]["MIRROR_URL"] == "https://***@mirror.example/simple"  # the rest of a URL stays
    plain = sandbox.run(["settings", "show", "--set", 'environment={"NCCL_DEBUG": "WARN", "MY_DIR": "/opt/x"}'])[1]
    assert '"NCCL_DEBUG": "WARN"' in plain and '"MY_DIR": "/opt/x"' in plain  # what is no secret is shown


# -- the environment -------------------------------------------------------------------------------------------------


def planted_variable(name: str, port: int) -> str:
    """A URL with the secret as its password (to a port nothing answers) for a URL variable, else the secret."""
    return f"http://user:{SECRET}@127.0.0.1:{port}/" if name in variables()[0] else SECRET


def network_invocations(sandbox: Sandbox) -> list[list[str]]:
    """The commands that go out: to the hub (lock, fetch), to a server (bench run, compare), to the package index
    (a release version pip fetches)."""
    return [["models", "lock", "example/tiny", "-o", str(sandbox.root / "out" / "x.lock.json")],
            ["models", "fetch", "--lock", str(EXAMPLE_LOCK), "--dir", str(sandbox.root / "model")],
            ["bench", "run", "--url", sandbox.url, "--output", str(sandbox.root / "out" / "r.jsonl")],
            ["bench", "compare", sandbox.url, sandbox.url],
            ["patch", "check", "--sglang", "0.5.99"]]  # fmt: skip


def test_a_secret_in_any_variable_the_tools_read_never_comes_out(sandbox):
    urls, others = variables()
    everything = {name: planted_variable(name, sandbox.port) for name in [*urls, *others]}
    runs = [(argv, everything, False) for path, command in COMMANDS.items()
            for argv in invocations(path, command, sandbox, [], set())]  # fmt: skip
    # Each URL variable alone: `models fetch` is left out there (its hub client retries an unreachable hub for 23 s;
    # its requests go through the same client and messages as `models lock`'s) and runs above with all of them.
    runs += [(argv, {name: planted_variable(name, sandbox.port)}, False) for name in urls
             for argv in network_invocations(sandbox) if argv[:2] != ["models", "fetch"]]  # fmt: skip
    assert run_all(sandbox, runs) == []


def test_a_password_in_the_hubs_address_is_hidden(sandbox):
    """The issue's case: HF_ENDPOINT with a password was printed whole in "cannot reach the hub at ..."."""
    endpoint = {"HF_ENDPOINT": f"http://u:{SECRET}@127.0.0.1:{sandbox.port}"}
    for argv in network_invocations(sandbox)[:2]:
        leaks, said = sandbox.run(argv, endpoint)
        assert leaks == [] and f"cannot reach the hub at http://***@127.0.0.1:{sandbox.port}" in said, said[-800:]


# -- paths and the files they name -------------------------------------------------------------------------------------


def holding_the_secret(sandbox: Sandbox, name: str) -> Path:
    """A file with the secret in every form a reader of this project takes: a JSON object (as a key and as the
    values of the fields settings, locks and results have), a second JSON line, and plain text."""
    record = {SECRET: SECRET, "type": "run", "label": SECRET, "repo": SECRET, "model_path": SECRET, "tp_size": SECRET}
    return sandbox.file(name, json.dumps(record) + "\n" + json.dumps({"type": "request", "label": SECRET}) + "\n")


def generate_path_arguments() -> list[str]:
    """kubernetes/generate.py's path arguments, from its argparse definition (the add_argument calls typed a path)."""
    calls = [n for n in ast.walk(ast.parse(GENERATE.read_text())) if isinstance(n, ast.Call)
             and ast.unparse(n.func).endswith("add_argument")]  # fmt: skip
    return [n.args[0].value for n in calls if any(k.arg == "type" and ast.unparse(k.value) in ("Path", "_path")
                                                  for k in n.keywords)]  # fmt: skip


def test_a_secret_as_any_path_or_in_any_file_never_comes_out(sandbox):
    runs = []
    for path, command in COMMANDS.items():
        for param in command.params:
            if not is_path(param):
                continue
            secret_path = sandbox.root / "missing" / SECRET
            secret_dir = sandbox.inputs / f"dir-{param.name}"
            holding_the_secret(sandbox, f"dir-{param.name}/{SECRET}.json")
            held = holding_the_secret(sandbox, f"{param.name}-{SECRET}.json".replace(SECRET, "held"))
            for value in (str(secret_path), str(held), str(secret_dir)):
                planted = cli_catalog.given(param, value)
                argv = [*path, *planted, *fill(path, command, sandbox, {param.name})]
                runs += [(argv, {}, True), ([*argv, "--dry-run"], {}, True)] if takes(command, "dry_run") else \
                    [(argv, {}, True)]  # fmt: skip
    for option in generate_path_arguments():
        for value in (str(sandbox.root / "missing" / SECRET), str(holding_the_secret(sandbox, "lock-held.json"))):
            runs.append(([str(GENERATE), option, value, "--check"], {}, True))
    assert run_all(sandbox, runs) == []


def test_the_search_finds_a_secret_where_one_comes_out(sandbox):
    """The search itself: the secret cut short at either end, printed or written, is caught; a run that writes
    nothing of it is clean."""
    assert found_in(SECRET[:20] + "...") and found_in("..." + SECRET[14:]) and not found_in("sk-***")
    assert generate_path_arguments() == ["--target-lock", "--draft-lock", "--output"]
    leaks, _ = sandbox.run(["-c", f"open('w.txt', 'w').write({SECRET!r})"], python=True)
    assert leaks == [f"the file {sandbox.root / 'work' / 'w.txt'}"]
    assert sandbox.run(["-c", "print('nothing')"], python=True)[0] == []
