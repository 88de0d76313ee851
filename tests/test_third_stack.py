"""A third stack is its data and one entry in nix/pins.json: nothing else names a stack.

In a copy of the repository, a made-up SGLang 0.5.24 gets a stack: the newest stack's data folder, workspace and patch
series copied under its name, and one entry in nix/pins.json (its pin, its stack). Its release is a copy of the newest
pristine tree that says it is 0.5.24 (a stand-in: no 0.5.24 exists; the tools read a tree's version from the tree).
Then, generated from the definitions rather than from a list:
- every command that takes --sglang (click's own definitions) does on 0.5.24 what it does on the newest release:
  the same exit status and the same output once the version and the paths are put back;
- the Kubernetes generator renders the 0.5.24 stack as the newest, and offers it (its --sglang choices);
- with the flake's inputs staged, every flake output of the newest stack has a 0.5.24 twin (packages, apps, checks).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import click
import pytest
from conftest import REPO
from sglang_eagle3 import stacks
from sglang_eagle3.cli import main as cli_main
from support.cli_catalog import subcommands
from support.flake_eval import Workspace, needs_flake_eval, tracked_files
from support.gpus import fake_nvidia_smi
from support.own_resources import refused_port

NEW = "0.5.24"
LIKE = stacks.versions()[-1]  # the newest stack: the made-up one is a copy of it
SYSTEM = "x86_64-linux"


def add_stack(repo: Path) -> None:
    """The newest stack's data, workspace and series copied under NEW's name, and NEW's entry in nix/pins.json."""
    old = stacks.stacks()[LIKE]
    renamed = {old.data: old.data.replace(LIKE, NEW), old.workspace: old.workspace.replace(LIKE, NEW),
               old.series: old.series.replace(LIKE, NEW)}  # fmt: skip
    for source, target in renamed.items():
        if not (repo / target).exists():
            shutil.copytree(repo / source, repo / target)
    pins = json.loads((repo / "nix" / "pins.json").read_text())
    pins[f"sglang-{NEW}"] = {**old.pin, "version": NEW, "wheel": old.pin["wheel"].replace(LIKE, NEW)}
    entry = pins["stacks"][LIKE]
    pins["stacks"][NEW] = {**entry, "sglang": f"sglang-{NEW}", "workspace": renamed[old.workspace],
                           "data": renamed[old.data]}  # fmt: skip
    (repo / "nix" / "pins.json").write_text(json.dumps(pins, indent=1) + "\n")


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    root = tmp_path_factory.mktemp("third-stack") / "repo"
    for name in tracked_files(REPO):
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / name, root / name, follow_symlinks=False)
    add_stack(root)
    subprocess.run(["git", "init", "-q"], cwd=root, check=True)
    subprocess.run(["git", "add", "-A"], cwd=root, check=True)
    return root


@pytest.fixture(scope="module")
def releases(newest_tree, tmp_path_factory):
    """The newest pristine tree, and a copy of it that says it is NEW."""
    copy = tmp_path_factory.mktemp("release") / f"sglang-{NEW}"
    shutil.copytree(newest_tree / "sglang", copy / "sglang")
    version = copy / "sglang" / "_version.py"
    version.write_text(version.read_text().replace(LIKE, NEW))
    for info in newest_tree.glob(f"sglang-{LIKE}.dist-info"):
        target = copy / info.name.replace(LIKE, NEW)
        shutil.copytree(info, target)
        (target / "METADATA").write_text(
            (target / "METADATA").read_text().replace(f"Version: {LIKE}", f"Version: {NEW}")
        )
    return {LIKE: newest_tree, NEW: copy}


def commands_taking_sglang() -> list[tuple[str, ...]]:
    def walk(command, path=()):
        if isinstance(command, click.Group):
            for name, sub in subcommands(command).items():
                yield from walk(sub, (*path, name))
        elif any(p.name == "sglang" for p in command.params):
            yield path

    return sorted(walk(cli_main))


# What each command needs beside --sglang to run without a GPU, a model or a server. A command that takes --sglang and
# is not here fails test_every_sglang_command_is_run: give it its arguments.
ARGUMENTS = {
    ("probe",): [],
    ("serve",): ["--dry-run", "--set", "port={port}"],
    ("patch", "check"): [],
    ("patch", "verify"): [],
    ("patch", "apply"): [],  # on a copy of each tree (it writes)
    ("bench", "sweep"): ["--output-dir", "{work}/sweep", "--set", "port={port}"],  # stops at its preflight here
}


def test_every_sglang_command_is_run():
    assert sorted(ARGUMENTS) == commands_taking_sglang()


def run(repo: Path, command: tuple[str, ...], tree: Path, tmp_path: Path, port: int) -> subprocess.CompletedProcess:
    tmp_path.mkdir(parents=True, exist_ok=True)
    args = [a.format(tree=tree, port=port, work=tmp_path) for a in ARGUMENTS[command]]
    # The suite's own caches: a scan is keyed by the tree's content, the same for both releases (and other tests').
    env = {**os.environ, "PYTHONPATH": str(repo / "python" / "src"),
           "SGLANG_EAGLE3_NVIDIA_SMI": fake_nvidia_smi(tmp_path, "8x-rtx-pro-6000.csv")}  # fmt: skip
    return subprocess.run([sys.executable, "-m", "sglang_eagle3.cli", *command, "--sglang", str(tree), *args],
                          capture_output=True, text=True, env=env, cwd=repo, timeout=900)  # fmt: skip


def normalised(text: str, tree: Path, repo: Path, work: Path | None = None) -> str:
    for path, name in ((sys.executable, "<python>"), (tree, "<tree>"), (repo, "<repo>"), (work, "<work>")):
        if path is not None:
            text = text.replace(str(path), name)
    return text.replace(NEW, LIKE).replace(NEW.replace(".", "_"), LIKE.replace(".", "_"))


@pytest.mark.parametrize("command", sorted(ARGUMENTS), ids=" ".join)
def test_a_command_does_on_the_third_stack_what_it_does_on_the_newest(command, repo, releases, tmp_path):
    results = {}
    with refused_port() as port:
        for version, tree in releases.items():
            if command == ("patch", "apply"):  # it writes: a copy of each tree
                shutil.copytree(tree, tmp_path / version / "tree")
                tree = tmp_path / version / "tree"
            results[version] = (run(REPO if version == LIKE else repo, command, tree, tmp_path / version, port), tree)
    (old, old_tree), (new, new_tree) = results[LIKE], results[NEW]
    assert "Traceback" not in new.stderr and stacks.not_a_stack(NEW).split(" (")[0] not in new.stdout + new.stderr
    assert new.returncode == old.returncode, new.stdout + new.stderr
    assert normalised(new.stdout, new_tree, repo, tmp_path / NEW) == normalised(
        old.stdout, old_tree, REPO, tmp_path / LIKE
    )


def test_the_kubernetes_generator_renders_the_third_stack_as_the_newest(repo, tmp_path):
    generate = repo / "kubernetes" / "generate.py"
    env = {**os.environ, "PYTHONPATH": str(repo / "python" / "src")}
    shown = subprocess.run([sys.executable, str(generate), "--help"], capture_output=True, text=True, env=env)
    assert NEW in shown.stdout, shown.stdout  # offered: its --sglang choices are the stacks
    outputs = {}
    for version in (LIKE, NEW):
        out = tmp_path / version
        subprocess.run([sys.executable, str(generate), "--sglang", version, "--output", str(out)], env=env, cwd=repo,
                       check=True, capture_output=True)  # fmt: skip
        outputs[version] = {p.relative_to(out): p.read_text() for p in sorted(out.rglob("*")) if p.is_file()}
    assert outputs[LIKE].keys() == outputs[NEW].keys()
    for name, text in outputs[NEW].items():
        assert normalised(text, tmp_path, repo) == normalised(outputs[LIKE][name], tmp_path, repo), name


@needs_flake_eval()
def test_every_flake_output_of_the_newest_stack_has_a_twin(repo, tmp_path):
    ws = Workspace(tmp_path / "flake", repo=repo)
    suffix, twin = "-" + LIKE.replace(".", "_"), "-" + NEW.replace(".", "_")
    for kind in ("packages", "apps", "checks"):
        names = set(ws.eval(f"{kind}.{SYSTEM}", apply="builtins.attrNames"))
        of_like = {n for n in names if n.endswith(suffix)}
        assert of_like, kind
        assert {n.replace(suffix, twin) for n in of_like} <= names, kind


def test_a_package_without_its_pins_says_where_they_belong(tmp_path):
    """The stack list's one source is pins.json; an install that lacks it (a package copied without the wheel's
    force-include, as the stand-in image once was) names the file and where it belongs, not a bare KeyError."""
    copy = tmp_path / "a" / "b" / "src"
    shutil.copytree(REPO / "python" / "src" / "sglang_eagle3", copy / "sglang_eagle3",
                    ignore=shutil.ignore_patterns("__pycache__", "pins.json"))  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(copy)}
    env.pop("SGLANG_EAGLE3_TRACEBACK", None)
    done = subprocess.run([sys.executable, "-m", "sglang_eagle3", "patch", "list"], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 70, done.stderr
    assert "has no pins.json" in done.stderr and "force-include" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr and "KeyError" not in done.stderr, done.stderr
