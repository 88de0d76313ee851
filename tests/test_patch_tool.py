"""`sglang-eagle3 patch apply|verify` on real copies of the SGLang 0.5.9 wheel."""

from __future__ import annotations

import json

from conftest import SERIES_DIR, gnu_patch, series_names, snapshot
from sglang_eagle3.trees import patchset


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


def test_a_series_that_creates_and_deletes_files_is_checked_as_gnu_patch_applies_it(tmp_path):
    """A file the series creates need not be there before, not even for a later patch that changes it; a file a
    patch deletes is not asked for once it is gone; a removed line that reads like a header is no header."""
    (tmp_path / "sglang").mkdir()
    (tmp_path / "sglang" / "_version.py").write_text("__version__ = '9.9.9'\n")
    (tmp_path / "sglang" / "old.py").write_text("gone = 1\n")
    (tmp_path / "sglang" / "kept.py").write_text("-- not a header\nx = 1\n")
    texts = {
        "0001-create.patch": "create\n--- /dev/null\n+++ b/sglang/new.py\n@@ -0,0 +1 @@\n+y = 1\n",
        "0002-change-new.patch": "change\n--- a/sglang/new.py\n+++ b/sglang/new.py\n@@ -1 +1 @@\n-y = 1\n+y = 2\n",
        "0003-delete.patch": "delete\n--- a/sglang/old.py\n+++ /dev/null\n@@ -1 +0,0 @@\n-gone = 1\n",
        "0004-header-like-line.patch": (
            "edit\n--- a/sglang/kept.py\n+++ b/sglang/kept.py\n@@ -1,2 +1 @@\n--- not a header\n x = 1\n"
        ),
    }
    directory = tmp_path / "sglang-9.9.9"
    directory.mkdir()
    for name, text in texts.items():
        (directory / name).write_text(text)
    series = patchset.PatchSeries(directory, "9.9.9", tuple(patchset.Patch(n, directory / n) for n in texts))
    assert [p.changed_files for p in series.patches] == [[], ["sglang/new.py"], [], ["sglang/kept.py"]]
    assert series.patches[0].created_files == ["sglang/new.py"]
    tree = patchset.SGLangTree(tmp_path, "9.9.9")
    assert [s.state for s in patchset.verify(series, tree)][0] is patchset.PatchState.NOT_APPLIED
    for patch in series.patches:  # applied one by one, as the series goes: old.py is gone at the end
        assert gnu_patch(tmp_path, patch.path).returncode == 0, patch.name
    assert not (tmp_path / "sglang" / "old.py").exists()
    states = {s.patch.name: s.state for s in patchset.verify(series, tree)}  # no TreeIncomplete for old.py
    assert states["0003-delete.patch"] is states["0004-header-like-line.patch"] is patchset.PatchState.APPLIED


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
