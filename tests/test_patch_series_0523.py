"""The patch series for SGLang 0.5.23 (patches/sglang-0.5.23/): it applies with --fuzz=0 to the
pristine 0.5.23 wheel, `patch check` picks it for 0.5.23, and each patch is proven by running
0.5.23's own code on CPU, before and after (tests/support/drivers/sglang_0523_driver.py says
what stands in, and why).
"""

from __future__ import annotations

import ast
import json
import os
import py_compile
import secrets
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import NEWEST, REPO, STAND_INS
from sglang_eagle3.trees import patchset
from support import pins

VERSION = pins.pins()[NEWEST]["version"]
SERIES = REPO / "patches" / f"sglang-{VERSION}"
NAMES = patchset.read_series(SERIES / "series")
DRIVER = Path(__file__).parent / "support" / "drivers" / "sglang_0523_driver.py"
ENV = {"PYTHONPATH": str(REPO / "python" / "src")}


def driver(tree: Path, *args: str) -> dict:
    env = {**os.environ, "PYTHONPATH": str(STAND_INS)}  # the tree itself is entered by the driver
    result = subprocess.run([sys.executable, str(DRIVER), str(tree), *args], capture_output=True, text=True,
                            env=env, timeout=300)  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.splitlines()[-1])


# -- the series ---------------------------------------------------------------------------------


def test_series_lists_every_patch_file_in_the_0_5_9_format():
    assert {p.name for p in SERIES.glob("*.patch")} == set(NAMES) and len(NAMES) == len(set(NAMES))
    # Only what 0.5.23 still needs: 0001 and 0004 are upstream, 0002 is not needed (tests/test_patch_check.py).
    assert [n[:4] for n in NAMES] == ["0003", "0005"]
    series = patchset.PatchSeries.load(SERIES)
    assert series.sglang_version == VERSION == "0.5.23"
    assert all(p.header.startswith(p.summary) and p.files for p in series.patches)


def test_patched_files_compile(patched_newest):
    touched = {f for name in NAMES for f in patchset.Patch(name, SERIES / name).files}
    assert len(touched) == 6  # 0003: 2 files; 0005: 4
    for rel in sorted(touched):
        py_compile.compile(str(patched_newest / rel), doraise=True)


# -- patch check picks the version's own series ---------------------------------------------------


def check(run_cli, tree: Path, *extra: str, rc: int = 0) -> dict:
    result = run_cli("patch", "check", "--sglang", str(tree), "--json", *extra, env=ENV)
    assert result.returncode == rc, result.stdout + result.stderr
    return json.loads(result.stdout)


def test_check_on_0_5_23_takes_its_own_series_and_every_patch_applies(run_cli, newest_tree):
    report = check(run_cli, newest_tree)
    assert report["series_version"] == "0.5.23" and report["series"] == str(SERIES)
    assert [(p["name"], p["outcome"]) for p in report["patches"]] == [(n, "applies") for n in NAMES]
    text = run_cli("patch", "check", "--sglang", str(newest_tree), env=ENV).stdout
    assert f"Patch set for SGLang 0.5.23 (2 patches, -p1 --fuzz=0) from {SERIES}:" in text


def test_check_on_the_patched_0_5_23_tree_says_already_applied(run_cli, patched_newest):
    report = check(run_cli, patched_newest)
    assert {p["outcome"] for p in report["patches"]} == {"already applied"}


def test_another_series_is_checked_when_named(run_cli, newest_tree):
    report = check(run_cli, newest_tree, "--series", str(REPO / "patches" / "sglang-0.5.9"), rc=1)
    assert report["series_version"] == "0.5.9" and len(report["patches"]) == 5
    markdown = run_cli("patch", "check", "--sglang", str(newest_tree), "--series", str(REPO / "patches" /
                       "sglang-0.5.9"), "--markdown", env=ENV).stdout  # fmt: skip
    assert "`sglang-eagle3 patch check --sglang 0.5.23 --series patches/sglang-0.5.9`" in markdown


def test_the_0_5_9_patch_0005_is_recognised_once_the_log_redacts_the_keys(run_cli, patched_newest):
    """On pristine 0.5.23 it is still needed (tests/test_patch_check.py); with the keys among the
    redaction's secrets, the check reads that and says so. The 0.5.9 series' secret-exit audit does not
    know 0.5.23's exits: those are the check's only failures."""
    report = check(run_cli, patched_newest, "--series", str(REPO / "patches" / "sglang-0.5.9"), rc=1)
    assert {f["name"] for f in report["findings"] if f["status"] == "fail"} == {"secret fields", "secret exits"}
    p = report["patches"][4]
    assert p["outcome"] == "already upstream" and p["where"] == "srt/entrypoints/engine.py:311"
    assert "lists api_key and admin_api_key among its secrets (srt/sampling/watermarking/core.py:29)" in p["message"]


def test_apply_and_verify_take_the_trees_own_series(run_cli, newest_tree, tree_copy):
    tree = tree_copy(newest_tree)
    verify = run_cli("patch", "verify", "--sglang", str(tree), env=ENV)
    assert verify.returncode == 1 and verify.stdout.count("not applied") == 2, verify.stdout + verify.stderr
    applied = run_cli("patch", "apply", "--sglang", str(tree), env=ENV)
    assert applied.returncode == 0 and applied.stdout.count("applied          000") == 2, applied.stderr
    assert run_cli("patch", "verify", "--sglang", str(tree), env=ENV).returncode == 0


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda d: d.mkdir(), "no series file in"),
        (lambda d: (d.mkdir(), (d / "series").write_text("0009-missing.patch\n")), "lists patches that do not exist"),
    ],
)
def test_a_bad_series_directory_exits_2(run_cli, newest_tree, tmp_path, make, message):
    directory = tmp_path / "sglang-0.5.23"
    make(directory)
    result = run_cli("patch", "check", "--sglang", str(newest_tree), "--series", str(directory), env=ENV)
    assert result.returncode == 2 and message in result.stderr and "Traceback" not in result.stderr


def test_the_version_lookup_is_the_one_nix_reads(monkeypatch, tmp_path):
    """patches/sglang-<version>/ for a version; a Nix store copy of a series counts as its version."""
    monkeypatch.delenv("SGLANG_EAGLE3_PATCHES", raising=False)
    assert patchset.find_series_dir("0.5.23") == SERIES and patchset.find_series_dir("0.5.21") is None
    assert patchset.PatchSeries.for_version("0.5.21").sglang_version == "0.5.9"  # no series of its own
    store_copy = tmp_path / "0123456789abcdfghijklmnpqrsvwxyz-sglang-0.5.23"
    shutil.copytree(SERIES, store_copy)
    monkeypatch.setenv("SGLANG_EAGLE3_PATCHES", str(store_copy))
    assert patchset.PatchSeries.load().sglang_version == "0.5.23"  # what the 0.5.23 stack's wrapper sets
    assert patchset.find_series_dir("0.5.23") == store_copy
    assert patchset.find_series_dir("0.5.9") == REPO / "patches" / "sglang-0.5.9"  # not the env's version


# -- 0003: SM120 fusion on explicit request only ------------------------------------------------------


@pytest.fixture(scope="module")
def fusion(newest_tree, patched_newest) -> dict:
    return {"pristine": driver(newest_tree, "fusion"), "patched": driver(patched_newest, "fusion")}


def test_0003_sm120_fusion_runs_only_on_explicit_request(fusion):
    patched = fusion["patched"]
    assert patched["sm120 None nnodes=1"] is None  # never auto-enabled: the fusion stays off
    assert patched["sm120 auto nnodes=1"] == "trtllm"  # --flashinfer-allreduce-fusion-backend auto
    assert patched["sm120 trtllm nnodes=1"] == "trtllm"
    assert patched["sm120 trtllm nnodes=2"].startswith("ValueError: ") and "single-node" in patched[
        "sm120 trtllm nnodes=2"]  # fmt: skip
    assert patched["sm120 mnnvl nnodes=1"].startswith("ValueError: ")  # FlashInfer builds mnnvl for 9 and 10 only


def test_0003_without_it_an_explicit_request_on_sm120_raises(fusion):
    pristine = fusion["pristine"]
    assert pristine["sm120 None nnodes=1"] is None
    for requested in ("auto", "trtllm"):
        assert pristine[f"sm120 {requested} nnodes=1"] == (
            "ValueError: FlashInfer allreduce fusion requires SM90 or SM10X NVIDIA GPUs."
        )


def test_0003_leaves_sm90_and_sm100_as_they_were(fusion):
    for gpu in ("sm90", "sm100"):
        rows = {k: v for k, v in fusion["pristine"].items() if k.startswith(gpu)}
        assert rows and rows == {k: fusion["patched"][k] for k in rows}
    assert fusion["patched"]["sm90 None nnodes=1"] == "trtllm" and fusion["patched"]["sm100 None nnodes=1"] == "mnnvl"


def test_0003_the_run_time_gate_lets_an_sm120_backend_through(newest_tree, patched_newest):
    pristine, patched = driver(newest_tree, "gate"), driver(patched_newest, "gate")
    assert pristine["sm120 trtllm"] is False and patched["sm120 trtllm"] is True
    assert patched["sm120 None"] is False  # no backend, no fusion
    assert {k: v for k, v in pristine.items() if not k.startswith("sm120")} == {
        k: v for k, v in patched.items() if not k.startswith("sm120")
    }


def test_0003_keeps_the_resolver_gate_one_readable_condition(patched_newest):
    """The probe reads the gate: one ``if not (...): raise`` naming every allowed generation."""
    module = ast.parse((patched_newest / "sglang/srt/layers/flashinfer_comm_fusion.py").read_text())
    resolver = next(n for n in module.body if isinstance(n, ast.FunctionDef) and n.name == "_resolve_backend")
    gate = next(n for n in resolver.body if isinstance(n, ast.If))
    assert ast.unparse(gate.test) == (
        "not (get_platform().is_sm90 or get_platform().is_sm100 or get_platform().is_sm120)"
    )
    assert isinstance(gate.body[0], ast.Raise)


# -- 0005: the API keys in no log line and no server-info reply -----------------------------------------


@pytest.fixture(scope="module")
def keys() -> tuple[str, str]:
    return f"sk-{secrets.token_hex(16)}", f"adm-{secrets.token_hex(16)}"


def test_0005_without_it_0_5_23_shows_the_keys(newest_tree, keys):
    api, admin = keys
    shown = driver(newest_tree, "keys", api, admin)
    for where in ("log", "server_info", "launch_command", "repr"):
        assert api in shown[where] and admin in shown[where], where
    assert shown["info"]["api_key"] == api and shown["internal_state"]["admin_api_key"] == admin


def test_0005_hides_the_keys_behind_a_marker(patched_newest, keys):
    api, admin = keys
    shown = driver(patched_newest, "keys", api, admin)
    for where in ("log", "server_info", "launch_command", "repr"):
        assert api not in shown[where] and admin not in shown[where], where
    assert "'api_key': '<redacted>'" in shown["log"] and "'admin_api_key': '<redacted>'" in shown["log"]
    assert shown["info"] == {"api_key": "<redacted>", "admin_api_key": "<redacted>", "model_path": "m"}
    assert shown["internal_state"] == {"api_key": "<redacted>", "admin_api_key": "<redacted>"}
    assert shown["launch_command"] == "--model-path m --api-key <redacted> --admin-api-key=<redacted>"
    assert "model_path='m'" in shown["repr"] and "api_key" not in shown["repr"]
