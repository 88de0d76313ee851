"""Defaults defined once: the probe takes the server settings' defaults, and a shared option is declared once."""

from __future__ import annotations

import ast
import collections
import inspect
from pathlib import Path

import click
from sglang_eagle3.cli import main
from sglang_eagle3.commands.probe import probe_command
from sglang_eagle3.judging import draft_check, speculative_support
from sglang_eagle3.serving import settings
from support.cli_catalog import subcommands

PACKAGE = Path(__file__).resolve().parents[1] / "python" / "src" / "sglang_eagle3"

# The probe's parameter -> where its default is defined.
PROBE_DEFAULTS = {
    "algorithm": settings.default("speculative_algorithm"),
    "compute_capability": settings.TUNED_COMPUTE_CAPABILITY,
    "tp_size": settings.default("tp_size"),
    "torch_symm_mem": settings.default("enable_torch_symm_mem"),
    "allreduce_fusion": settings.default("enable_flashinfer_allreduce_fusion"),
}


def _function(path: Path, name: str) -> ast.FunctionDef:
    return next(n for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, ast.FunctionDef) and n.name == name)


def test_the_probe_takes_its_defaults_from_the_settings():
    """Same values as the settings, and none restated as a literal (a changed setting would leave it behind)."""
    signature = inspect.signature(speculative_support.probe).parameters
    assert {name: signature[name].default for name in PROBE_DEFAULTS} == PROBE_DEFAULTS
    assert inspect.signature(draft_check.check).parameters["algorithm"].default == PROBE_DEFAULTS["algorithm"]
    probe_def = _function(PACKAGE / "judging" / "speculative_support.py", "probe")
    with_default = [a.arg for a in probe_def.args.args][-len(probe_def.args.defaults) :]
    named = dict(zip(with_default, probe_def.args.defaults, strict=True))
    assert [name for name in PROBE_DEFAULTS if isinstance(named[name], ast.Constant)] == []


def test_the_probe_command_takes_the_settings_not_options_that_restate_them():
    """The probe command reads the settings as serve does (--config, --set, --profile: options.server_settings),
    and no option of its own restates a setting under another name (issue 36)."""
    probe_opts = {opt for p in probe_command.params for opt in p.opts}
    serve_opts = {opt for p in subcommands(main)["serve"].params for opt in p.opts}
    assert {"--config", "--set", "--profile"} <= probe_opts & serve_opts
    settings_names = {name.replace("_", "-") for name in settings.ServerSettings.model_fields} | {
        "tp", "algorithm", "allreduce-fusion", "torch-symm-mem", "pcie-ipc-allreduce", "model"}  # fmt: skip
    assert sorted(o for o in probe_opts if o.lstrip("-").removeprefix("no-") in settings_names) == []


def test_no_algorithm_or_capability_written_out_where_the_settings_define_it():
    """ "EAGLE3", "NEXTN", "12.0" as a value in judging/, commands/ or the sweep would be a second definition.

    A comparison (`algorithm != "EAGLE3"`) names an algorithm; it does not define a default; nor does a
    table from one algorithm to another (`{"EAGLE3": "EAGLE", ...}`: the other EAGLE generation).
    """
    found = []
    names = ("EAGLE3", "EAGLE", "NEXTN", "STANDALONE")
    for path in [
        *sorted((PACKAGE / "commands").glob("*.py")),
        *sorted((PACKAGE / "judging").glob("*.py")),
        PACKAGE / "bench" / "sweep.py",
    ]:
        tree = ast.parse(path.read_text())
        compared = {id(c) for n in ast.walk(tree) if isinstance(n, ast.Compare) for c in ast.walk(n)}
        compared |= {
            id(c)
            for n in ast.walk(tree)
            if isinstance(n, ast.Dict)
            and all(isinstance(c, ast.Constant) and c.value in names for c in [*n.keys, *n.values])
            for c in [*n.keys, *n.values]
        }
        found += [
            f"{path.name}:{n.lineno} {n.value!r}"
            for n in ast.walk(tree)
            if isinstance(n, ast.Constant) and n.value in ("EAGLE3", "EAGLE", "NEXTN", "STANDALONE", "12.0")
            and id(n) not in compared
        ]  # fmt: skip
    assert found == []


def _declared_options() -> dict[str, list[str]]:
    """Each option name -> where a `click.option(...)` declares it, over the whole package."""
    where = collections.defaultdict(list)
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and ast.unparse(node.func) == "click.option":
                for arg in node.args:
                    if isinstance(arg, ast.Constant) and str(arg.value).startswith("--"):
                        where[arg.value].append(f"{path.relative_to(PACKAGE)}:{node.lineno}")
    return where


# Options of one name that mean different things in different commands (so are not one option).
DIFFERENT_MEANINGS = {
    "--output": "bench run: the results file; models lock: the lock file or directory",
    "--draft": "probe: the one draft to check; bench sweep: each draft to sweep (repeatable)",
    "--jobs": "models lock and fetch: parallel downloads; models verify: files hashed in parallel (options.py)",
}


def test_every_shared_option_is_declared_once():
    twice = {name: places for name, places in _declared_options().items() if len(places) > 1}
    assert sorted(set(twice) - set(DIFFERENT_MEANINGS)) == []
    assert all(p.startswith("options.py") for p in twice.get("--jobs", []))  # both in options.py, one type


def test_the_shared_options_are_in_options_py():
    declared = _declared_options()
    for name in ("--json", "--sglang", "--lock", "--dir", "--plot/--no-plot", "--api-key-file"):
        assert [p.split(":")[0] for p in declared[name]] == ["options.py"], name


def _commands(group, prefix=()):
    for name, command in subcommands(group).items():
        if isinstance(command, click.Group):
            yield from _commands(command, (*prefix, name))
        else:
            yield " ".join((*prefix, name)), command


def test_every_command_that_reads_sglang_names_it_one_way():
    """--sglang DIR|WHEEL|VERSION on every command that reads SGLang's source (and only there; patch apply, which
    writes it, --sglang DIR); --target and --against, its former names, are gone (issue 36)."""
    reading = {}
    for name, command in _commands(main):
        found = [p for p in command.params if "--sglang" in p.opts]
        if found:
            reading[name] = found[0]
            text = command.get_help(click.Context(command, info_name=name))
            # patch apply writes the tree: a directory only, and its help says so (issue 36)
            metavar = "--sglang DIR " if name == "patch apply" else "--sglang DIR|WHEEL|VERSION"
            assert metavar in text
    assert sorted(reading) == ["bench sweep", "patch apply", "patch check", "patch verify", "probe", "serve"]
    assert {tuple(p.opts) for p in reading.values()} == {("--sglang",)}
    assert not [n for n, c in _commands(main) for p in c.params if {"--target", "--against"} & set(p.opts)]
    assert [n for n, p in reading.items() if p.required] == ["patch check"]
