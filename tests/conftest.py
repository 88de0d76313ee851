"""Shared fixtures: the pristine SGLang 0.5.9 wheel from PyPI, unpacked trees, the CLI.

The pristine source is the published wheel, fetched with pip and checked against the
sha256 pinned in nix/pins.json (the same pin the Nix build uses). Trees are unpacked
once per run (made_once: the workers share them); tests that change a tree get their own copy.
"""

from __future__ import annotations

import fcntl
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from sglang_eagle3.source.tree import locate
from sglang_eagle3.trees import patchset
from sglang_eagle3_audits.closure import DEFAULT_CACHE
from support import flake_eval, harness_env, k8s_crds, pins
from support.pinned_wheels import fetch_wheel, sha256_of, unpack

REPO = Path(__file__).resolve().parents[1]

# Python keeps the byte code of what the tests import. Processes by the hundred import the SGLang trees and the
# libraries this suite unpacks from wheels (no byte code in them), and compiling them in each process costs minutes
# of CPU; where the environment sets PYTHONDONTWRITEBYTECODE (the CI machine's does) every process would. Byte code
# is never what a test judges (snapshot() leaves __pycache__ out). The workers and every process they start inherit
# this environment.
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
sys.dont_write_bytecode = False
# One OpenMP thread a process: pytest-xdist already runs a test process a core, and each of them, and each SGLang
# server or torch program they start, would otherwise start a thread a core, whose waiting threads spin on the cores
# the others need (measured: test_draft_generated and test_patch_0004 on two workers, 115 s and 138 CPU-seconds
# with a thread a core, 88 s and 121 with one). Torch reads it; neither stack's sglang/srt nor this package does.
os.environ.setdefault("OMP_NUM_THREADS", "1")
# Inductor's C++ kernels without SIMD. SGLang compiles some functions (the MoE top-k: @torch.compile) and on a CPU
# inductor writes C++ for them. Before it picks an instruction set, each process builds a probe for AMX, AVX-512 and
# AVX2 and loads each in a new interpreter that imports torch: 6 to 12 of them a process, and 8.7 of a CPU model
# run's 16.7 CPU-seconds (drivers/eagle3_capture_driver.py; test_draft_generated and test_patch_0004 took 80
# CPU-seconds, 53 without). Scalar kernels run the same functions, the same on every machine; a test compares values
# computed in one process, and no GPU path runs these kernels.
os.environ.setdefault("TORCHINDUCTOR_VEC_ISA_OK", "0")
SERIES_DIR = REPO / "patches" / f"sglang-{pins.pins()['sglang']['version']}"
STAND_INS = Path(__file__).resolve().parent / "stand_ins"
# The pinned wheels, and the audits' scans of them: the audits' own cache root (one for the command and the tests).
CACHE = Path(harness_env.get(harness_env.CACHE) or DEFAULT_CACHE)


@pytest.fixture(scope="session")
def pristine_wheel() -> Path:
    # In the Nix sandbox (no network) the wheel comes from the same pin, via fetchurl.
    given = harness_env.get(harness_env.SGLANG_WHEEL)
    if given:
        actual = sha256_of(Path(given))
        assert actual == pins.pins()["sglang"]["sha256"], f"{given} has sha256 {actual}, not the pinned one"
        return Path(given)
    return fetch_wheel("sglang", CACHE)


def made_once(tmp_path_factory, name: str, make) -> Path:
    """The directory ``name``, filled by ``make(directory)`` once per run: pytest-xdist's workers share it (in the
    run's base directory, one worker makes it while the others wait on a lock), as one process would. Each worker
    made its own four trees: unpacking and patching them took 1.3 CPU-seconds, and compiling what SGLang's own run
    imports (byte code written beside the tree) 2.9 for each 0.5.23 tree, again in every worker. A make that failed
    or was cut short is started again."""
    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        base = base.parent  # the run's directory, above each worker's own
    directory, made = base / f"shared-{name}", base / f"shared-{name}.made"
    with open(base / f"shared-{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not made.exists():
            shutil.rmtree(directory, ignore_errors=True)
            directory.mkdir()
            make(directory)
            made.touch()
    return directory


@pytest.fixture(scope="session")
def pristine_tree(pristine_wheel, tmp_path_factory) -> Path:
    """The wheel unpacked: a directory holding sglang/ and its dist-info. Do not modify (every worker reads it)."""
    return made_once(tmp_path_factory, "pristine", lambda root: unpack(pristine_wheel, root))


NEWEST = "sglang-0.5.23"  # the newest SGLang release on PyPI (its pin in nix/pins.json)


@pytest.fixture(scope="session")
def newest_wheel() -> Path:
    """The newest SGLang release's real wheel from PyPI, sha256 checked against its pin."""
    if harness_env.get(harness_env.SGLANG_WHEEL):
        pytest.skip(f"the Nix check has no network and is given the {pins.pins()['sglang']['version']} wheel only")
    return fetch_wheel(NEWEST, CACHE, package="sglang")


@pytest.fixture(scope="session")
def newest_tree(newest_wheel, tmp_path_factory) -> Path:
    """The newest wheel unpacked (sglang/ and its dist-info). Do not modify (every worker reads it)."""
    return made_once(tmp_path_factory, "newest", lambda root: unpack(newest_wheel, root))


@pytest.fixture
def release_cache(tmp_path, pristine_wheel) -> dict[str, str]:
    """The environment of a CLI whose SGLang wheel cache ($XDG_CACHE_HOME/sglang-eagle3/sglang) already holds the
    pinned 0.5.9 wheel (a link to the session's): `--sglang 0.5.9` reads it without a download."""
    wheels = tmp_path / "xdg" / "sglang-eagle3" / "sglang" / "wheels"
    wheels.mkdir(parents=True)
    (wheels / pins.pins()["sglang"]["wheel"]).symlink_to(pristine_wheel)
    return {"XDG_CACHE_HOME": str(tmp_path / "xdg")}


@pytest.fixture(params=["0.5.9", "0.5.23"])
def tree(request):
    """Each pristine tree (0.5.9's, 0.5.23's), located, with its version: for tests that run on both stacks."""
    fixture = "pristine_tree" if request.param == "0.5.9" else "newest_tree"
    found = locate(request.getfixturevalue(fixture))
    assert found.version == request.param
    return found


def series_names() -> list[str]:
    return patchset.read_series(SERIES_DIR / "series")


def gnu_patch(tree: Path, patch: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["patch", *patchset.PATCH_FLAGS, "-d", str(tree), "-i", str(patch), *extra],
        capture_output=True,
        text=True,
    )


def patched_copy(tree: Path, series_dir: Path, root: Path) -> Path:
    """`tree`'s sglang package and dist-info copied to `root`, with the series in `series_dir` applied by plain
    GNU patch, as Nix's patchPhase does."""
    shutil.copytree(tree / "sglang", root / "sglang")
    dist_info = next(tree.glob("sglang-*.dist-info"))
    shutil.copytree(dist_info, root / dist_info.name)
    for name in patchset.read_series(series_dir / "series"):
        result = gnu_patch(root, series_dir / name)
        assert result.returncode == 0, f"{name} does not apply:\n{result.stdout}{result.stderr}"
    return root


@pytest.fixture(scope="session")
def patched_tree(pristine_tree, tmp_path_factory) -> Path:
    """Pristine tree with the series applied by plain GNU patch, as Nix's patchPhase does. Do not modify."""
    return made_once(tmp_path_factory, "patched", lambda root: patched_copy(pristine_tree, SERIES_DIR, root))


@pytest.fixture(scope="session")
def patched_newest(newest_tree, tmp_path_factory) -> Path:
    """The newest wheel with its own series (patches/sglang-<version>/) applied by plain GNU patch. Do not modify."""
    series = REPO / "patches" / f"sglang-{pins.pins()[NEWEST]['version']}"
    return made_once(tmp_path_factory, "patched-newest", lambda root: patched_copy(newest_tree, series, root))


@pytest.fixture
def tree_copy(tmp_path):
    """Make a private, writable copy of a session tree."""

    def copy(source: Path) -> Path:
        target = tmp_path / "tree"
        shutil.copytree(source, target)
        return target

    return copy


def snapshot(tree: Path) -> dict[str, str]:
    """Content hash of every file under tree, to prove a tree was not changed."""
    return {
        str(p.relative_to(tree)): sha256_of(p)
        for p in sorted(tree.rglob("*"))
        if p.is_file() and "__pycache__" not in p.parts  # byte code written by imports is not content
    }


@pytest.fixture
def run_cli():
    """Run the real `sglang-eagle3` entry point in a subprocess."""

    def run(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
        full_env = {**os.environ, **(env or {})}
        return subprocess.run(
            [sys.executable, "-m", "sglang_eagle3.cli", *args], capture_output=True, text=True, env=full_env
        )

    return run


# -- timing tests: apart from the functional suite ----------------------------------------------
# Tests marked `timing` compare measured rates with what the stand-in server sent, within 1%.
# They hold on a loaded machine but are wall-clock measurements, so they run only when asked
# for: `tests/run -m timing` (or any -m expression naming them).


def pytest_terminal_summary(terminalreporter, config):
    """A run that skipped the flake evaluation says so in one line, just above the final count
    (read from the skip reports, which reach the controller of a pytest-xdist run too)."""
    why = flake_eval.unavailable()
    skipped = terminalreporter.stats.get("skipped", [])
    if why and any(why in str(report.longrepr) for report in skipped):
        terminalreporter.write_line(f"NOTE: the flake was NOT evaluated: {why}", yellow=True, bold=True)
    why = k8s_crds.unavailable()
    if why and any(why in str(report.longrepr) for report in skipped):
        terminalreporter.write_line(
            f"NOTE: the LeaderWorkerSet and Prometheus objects were NOT validated against their CRDs: {why}",
            yellow=True, bold=True,
        )  # fmt: skip


# -- the quick tier: `tests/run --quick` leaves out the tests tests/slow-tests.txt names ----------------------
SLOW_LIST = Path(__file__).resolve().parent / "slow-tests.txt"


def slow_list() -> dict[str, str]:
    """The names in tests/slow-tests.txt (``file.py::function``, every parametrization of it), each with its comment."""
    lines = (line.partition("#") for line in SLOW_LIST.read_text().splitlines())
    return {name.strip(): comment.strip() for name, _, comment in lines if name.strip()}


def slow_tests() -> set[str]:
    return set(slow_list())


def file_seconds() -> dict[str, float]:
    """Each file's seconds by the figures of tests/slow-tests.txt (2, the list's threshold, for a line without one).
    The figure of a fixture its tests share (the lines that name it) counts once a file."""
    totals: dict[str, float] = {}
    counted = set()
    for name, comment in slow_list().items():
        file = name.split("::")[0]
        if "fixture" in comment and (file, comment) in counted:
            continue
        counted.add((file, comment))
        figures = [float(x) for x in re.findall(r"(\d+(?:\.\d+)?) s\b", comment)]
        totals[file] = totals.get(file, 0.0) + (sum(figures) if figures else 2.0)
    return totals


def function_name(item) -> str:
    """``test_x.py::test_y`` for any parametrization of test_y."""
    return f"{item.path.name}::{item.originalname}"


def pytest_configure(config):
    harness_env.adopt_former_names()  # before any CLI runs: none of them is a setting
    if not hasattr(config, "workerinput"):  # the run's first process: its pytest-xdist workers inherit the variable
        # One tvm-ffi cache a run, its workers' and every program they start: importing tvm-ffi beside torch compiles
        # its torch DLPack addon (about 23 CPU-seconds here) into $TVM_FFI_CACHE_DIR, default ~/.cache/tvm-ffi.
        # Fresh, so the addon a home kept from an earlier run never spares a test that compile; and shared, so each
        # tvm-ffi release compiles it once a run, not once a HOME (tvm-ffi's own lock makes the others wait for it).
        os.environ["TVM_FFI_CACHE_DIR"] = tempfile.mkdtemp(prefix="eagle3-tests-tvm-ffi-")
    config.addinivalue_line("markers", "timing: wall-clock accuracy tests; run with -m timing")
    config.addinivalue_line("markers", "slow: named in tests/slow-tests.txt; `tests/run --quick` leaves them out")


def pytest_unconfigure(config):
    if not hasattr(config, "workerinput"):
        shutil.rmtree(os.environ.get("TVM_FFI_CACHE_DIR", ""), ignore_errors=True)


def pytest_collection_modifyitems(config, items):
    slow = slow_tests()
    for item in items:
        if function_name(item) in slow:
            item.add_marker(pytest.mark.slow)
    longest_files_first(items)
    if config.option.markexpr:
        return  # the caller chose with -m
    kept = [item for item in items if "timing" not in item.keywords]
    deselected = [item for item in items if "timing" in item.keywords]
    if deselected:
        config.hook.pytest_deselected(items=deselected)
        items[:] = kept


def longest_files_first(items) -> None:
    """The files that take longest (their tests' figures in tests/slow-tests.txt) go first, each file's tests in
    their order. tests/run hands the files to the workers in this order (pytest-xdist's --no-loadscope-reorder), so
    the long ones (the router's, which mostly wait on the cluster events they stage) start while the short ones
    keep the other workers busy, and none starts last and runs alone."""
    seconds = file_seconds()
    items.sort(key=lambda item: -seconds.get(item.path.name, 0.0))  # stable: a file's tests stay together, in order


@pytest.fixture
def exe_stub(tmp_path):
    exe = tmp_path / "sglang-eagle3"
    exe.write_text("#!/bin/sh\n")
    exe.chmod(0o755)
    return exe
