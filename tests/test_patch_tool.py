"""`sglang-eagle3 patch apply|verify` on real copies of the SGLang 0.5.9 wheel."""

from __future__ import annotations

import json

from conftest import SERIES_DIR, gnu_patch, series_names, snapshot
from sglang_eagle3.source import patchset


def sglang_files(tree):
    return {k: v for k, v in snapshot(tree).items() if k.startswith("sglang/")}


def test_apply_gives_exactly_the_series_result(pristine_tree, patched_tree, tree_copy, run_cli):
    tree = tree_copy(pristine_tree)
    result = run_cli("patch", "apply", "--sglang", str(tree))
    assert result.returncode == 0, result.stderr
    for name in series_names():
        assert f"applied          {name}" in result.stdout
    assert sglang_files(tree) == sglang_files(patched_tree)
    assert not list(tree.glob(".sglang-eagle3-staging-*")), "staging directory left behind"


def test_second_apply_changes_nothing(patched_tree, tree_copy, run_cli):
    tree = tree_copy(patched_tree)
    before = snapshot(tree)
    result = run_cli("patch", "apply", "--sglang", str(tree))
    assert result.returncode == 0
    assert f"All {len(series_names())} patches are already applied" in result.stdout
    assert snapshot(tree) == before


def test_partly_patched_tree_gets_the_rest(pristine_tree, patched_tree, tree_copy, run_cli):
    tree = tree_copy(pristine_tree)
    first = series_names()[0]
    assert gnu_patch(tree, SERIES_DIR / first).returncode == 0
    result = run_cli("patch", "apply", "--sglang", str(tree))
    assert result.returncode == 0
    assert f"already applied  {first}" in result.stdout
    assert sglang_files(tree) == sglang_files(patched_tree)


def test_conflict_leaves_the_tree_exactly_as_it_was(pristine_tree, tree_copy, run_cli):
    tree = tree_copy(pristine_tree)
    # Someone's hand edit touches the line the last patch changes.
    gate = tree / "sglang/srt/layers/communicator.py"
    gate.write_text(gate.read_text().replace("(_is_sm90_supported or _is_sm100_supported)", "(_is_sm90_supported)"))
    before = snapshot(tree)
    result = run_cli("patch", "apply", "--sglang", str(tree))
    assert result.returncode == 1
    assert "the tree was left unchanged" in result.stderr
    assert "0003-sm120-flashinfer-allreduce-fusion-opt-in.patch conflicts" in result.stderr
    assert snapshot(tree) == before  # the first two patches were not applied either


def test_a_tree_missing_a_file_the_series_changes_is_bad_input_naming_it(pristine_tree, tree_copy, run_cli):
    """A partial install (a file deleted, or the wrong directory) is not a conflict: the message names the file
    and the patch, not GNU patch's "can't find file to patch" after the patch's header."""
    tree = tree_copy(pristine_tree)
    series = patchset.PatchSeries.load(SERIES_DIR)
    changed = [rel for patch in series.patches for rel in patch.changed_files]
    assert changed and all((tree / rel).is_file() for rel in changed)  # the pristine wheel has them all
    rel = changed[-1]
    (tree / rel).unlink()
    before = snapshot(tree)
    for command in ("apply", "verify"):
        result = run_cli("patch", command, "--sglang", str(tree))
        assert result.returncode == 2, result.stderr
        assert f"lacks {rel}, which " in result.stderr and "not a whole SGLang 0.5.9 install" in result.stderr
        assert "can't find file to patch" not in result.stderr
    assert snapshot(tree) == before


def test_wrong_version_is_refused_with_the_version_found(pristine_tree, tree_copy, run_cli):
    tree = tree_copy(pristine_tree)
    version = tree / "sglang/_version.py"
    version.write_text(version.read_text().replace("'0.5.9'", "'0.5.8'"))
    before = snapshot(tree)
    for command in ("apply", "verify"):
        result = run_cli("patch", command, "--sglang", str(tree))
        assert result.returncode == 2
        assert "is SGLang 0.5.8, but this patch set is for SGLang 0.5.9" in result.stderr
        assert "Traceback" not in result.stderr
    assert snapshot(tree) == before


def test_verify_reports_the_three_states(pristine_tree, patched_tree, tree_copy, run_cli):
    result = run_cli("patch", "verify", "--sglang", str(patched_tree))
    assert result.returncode == 0
    assert result.stdout.count("applied ") == len(series_names()) and "not applied" not in result.stdout

    result = run_cli("patch", "verify", "--sglang", str(pristine_tree), "--json")
    assert result.returncode == 1
    states = {p["name"]: p["state"] for p in json.loads(result.stdout)["patches"]}
    assert set(states.values()) == {"not applied"}

    tree = tree_copy(pristine_tree)
    symm = tree / "sglang/srt/distributed/device_communicators/torch_symm_mem.py"
    symm.write_text(symm.read_text().replace("        10: [6, 8],", "        10: [8],  # edited by hand"))
    result = run_cli("patch", "verify", "--sglang", str(tree), "--json")
    assert result.returncode == 1
    states = {p["name"]: p["state"] for p in json.loads(result.stdout)["patches"]}
    # The hand edit conflicts with 0002 only; every other patch of the series still applies.
    assert states.pop("0002-sm120-torch-symm-mem.patch") == "conflict"
    assert list(states) == [n for n in series_names() if n != "0002-sm120-torch-symm-mem.patch"]
    assert set(states.values()) == {"not applied"}


def test_default_target_is_the_importable_sglang(pristine_tree, tree_copy, run_cli):
    tree = tree_copy(pristine_tree)
    result = run_cli("patch", "apply", env={"PYTHONPATH": str(tree)})
    assert result.returncode == 0, result.stderr
    assert str(tree / "sglang") in result.stdout
    result = run_cli("patch", "verify", env={"PYTHONPATH": str(tree)})
    assert result.returncode == 0


def test_target_may_be_the_package_directory(pristine_tree, tree_copy, run_cli):
    tree = tree_copy(pristine_tree)
    assert run_cli("patch", "apply", "--sglang", str(tree / "sglang")).returncode == 0
    assert run_cli("patch", "verify", "--sglang", str(tree)).returncode == 0


def test_list_shows_the_series(run_cli):
    result = run_cli("patch", "list")
    assert result.returncode == 0
    for name in series_names():
        assert name in result.stdout
