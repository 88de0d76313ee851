"""`sglang-eagle3 patch check --sglang`: each patch of the series on another SGLang tree.

On the pristine 0.5.9 wheel every patch applies; on the patched tree every one is already
applied; on the newest release's real wheel (0.5.23) each patch is what its source says
(read here in the tests' own words, so a change in the reading shows).
"""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import NEWEST, REPO, series_names
from sglang_eagle3.judging import patch_check
from sglang_eagle3.source.tree import locate
from sglang_eagle3.trees import patchset, release
from support import pins

ENV = {"PYTHONPATH": str(REPO / "python" / "src")}  # the subprocess runs this checkout's code
SERIES_0_5_9 = REPO / "patches" / "sglang-0.5.9"  # 0.5.23 has its own series: this one is checked with --series
DOC = REPO / "docs" / "upgrade.md"


def check_json(run_cli, against: Path | str, rc: int = 0) -> dict:
    result = run_cli("patch", "check", "--sglang", str(against), "--json", env=ENV)
    assert result.returncode == rc, result.stdout + result.stderr
    return json.loads(result.stdout)


def outcomes(report: dict) -> dict[str, str]:
    return {p["name"][:4]: p["outcome"] for p in report["patches"]}


def test_on_the_pristine_wheel_every_patch_applies(run_cli, pristine_tree):
    report = check_json(run_cli, pristine_tree)
    assert [p["name"] for p in report["patches"]] == series_names()
    assert set(outcomes(report).values()) == {"applies"}
    assert report["verdict"] == "ok" and report["sglang_version"] == "0.5.9"
    assert all(p["status"] == "ok" and not p["hunks"] for p in report["patches"])


def test_on_the_patched_tree_every_patch_is_already_applied(run_cli, patched_tree):
    report = check_json(run_cli, patched_tree)
    assert set(outcomes(report).values()) == {"already applied"}
    text = run_cli("patch", "check", "--sglang", str(patched_tree), env=ENV)
    assert text.returncode == 0 and text.stdout.count("[ OK ] 000") == 5
    assert "[ OK ] secret fields:" in text.stdout and "[ OK ] secret exits:" in text.stdout  # the audit, too
    assert "Verdict: OK (7 ok)" in text.stdout


def test_a_series_named_by_a_relative_path_is_read(pristine_tree):
    """`--series patches/sglang-0.5.9`, as docs/upgrade.md writes it, from the checkout (GNU patch runs elsewhere)."""
    command = [sys.executable, "-m", "sglang_eagle3.cli", "patch", "check", "--sglang", str(pristine_tree),
               "--series", "patches/sglang-0.5.9", "--json"]  # fmt: skip
    result = subprocess.run(command, capture_output=True, text=True, cwd=REPO, env={**os.environ, **ENV})
    assert result.returncode == 0, result.stdout + result.stderr
    assert set(outcomes(json.loads(result.stdout)).values()) == {"applies"}


def test_the_check_changes_nothing_in_the_tree(pristine_tree, tree_copy):
    from conftest import snapshot

    tree = tree_copy(pristine_tree)
    before = snapshot(tree)
    patch_check.check(patchset.PatchSeries.load(), locate(tree))
    assert snapshot(tree) == before


def test_a_conflict_shows_the_failing_hunk(run_cli, pristine_tree, tree_copy):
    tree = tree_copy(pristine_tree)
    communicator = tree / "sglang" / "srt" / "layers" / "communicator.py"
    text = communicator.read_text()
    assert "        (_is_sm90_supported or _is_sm100_supported)\n" in text
    communicator.write_text(text.replace("(_is_sm90_supported or _is_sm100_supported)", "(_is_sm90_supported)"))
    report = check_json(run_cli, tree, rc=1)
    assert outcomes(report) == {"0001": "applies", "0002": "applies", "0003": "conflicts", "0004": "applies",
                                "0005": "applies"}  # fmt: skip
    (hunk,) = next(p for p in report["patches"] if p["outcome"] == "conflicts")["hunks"]
    assert hunk["file"] == "sglang/srt/layers/communicator.py" and hunk["header"] == "@@ -92,7 +94,9 @@"
    assert hunk["reason"].startswith("FAILED at ")
    assert "-        (_is_sm90_supported or _is_sm100_supported)" in hunk["lines"]
    text = run_cli("patch", "check", "--sglang", str(tree), env=ENV).stdout
    assert "[FAIL] 0003-sm120-flashinfer-allreduce-fusion-opt-in.patch: conflicts:" in text
    assert "sglang/srt/layers/communicator.py @@ -92,7 +94,9 @@ (FAILED at" in text


def test_0001_still_needed_when_the_probe_does_not_find_the_methods(run_cli, pristine_tree, tree_copy):
    """A tree where 0001 does not apply and KimiK25 lacks the methods: the lookup says which, not 'upstream'."""
    tree = tree_copy(pristine_tree)
    kimi = tree / "sglang" / "srt" / "models" / "kimi_k25.py"
    context = "            self.language_model.load_weights(language_weights)\n"  # in 0001's hunk context
    assert context in kimi.read_text()
    kimi.write_text(kimi.read_text().replace(context, context.replace("\n", "  # changed\n")))
    report = check_json(run_cli, tree, rc=1)
    first = report["patches"][0]
    assert first["outcome"] == "still needed"
    assert (
        "does not find get_embed_and_head" in first["message"] and first["hunks"][0]["header"] == "@@ -772,5 +772,16 @@"
    )


# -- the newest release's real wheel -------------------------------------------------------


@pytest.fixture(scope="module")
def newest(newest_tree) -> dict:
    """The check's --json of the 0.5.9 series on the newest wheel, from the real command (once for this module)."""
    command = [sys.executable, "-m", "sglang_eagle3.cli", "patch", "check", "--sglang", str(newest_tree),
               "--series", str(SERIES_0_5_9), "--json"]  # fmt: skip
    result = subprocess.run(command, capture_output=True, text=True, env={**os.environ, **ENV})
    assert result.returncode == 1, result.stdout + result.stderr
    return json.loads(result.stdout)


def test_the_newest_wheel_is_the_pinned_release(newest, newest_wheel):
    assert newest["sglang_version"] == pins.pins()[NEWEST]["version"] == "0.5.23"
    assert pins.pins()[NEWEST]["source"] == "PyPI" and newest_wheel.name == pins.pins()[NEWEST]["wheel"]
    assert outcomes(newest) == {
        "0001": "already upstream",
        "0002": "not needed",
        "0003": "still needed",
        "0004": "already upstream",
        "0005": "still needed",
    }
    assert newest["verdict"] == "fail"


def test_0001_upstream_recognised_by_the_probes_method_lookup(newest):
    p = newest["patches"][0]
    assert p["status"] == "ok" and p["where"] == "srt/models/kimi_k25.py:640"
    assert "the probe's method lookup finds the EAGLE-3 methods on KimiK25ForConditionalGeneration" in p["message"]
    for method, line in (
        ("get_embed_and_head", 965),
        ("set_embed_and_head", 976),
        ("set_eagle3_layers_to_capture", 928),
    ):
        assert f"{method} (srt/models/kimi_k25.py:{line})" in p["message"]
    assert p["hunks"] == []


def test_0002_not_needed_the_communicator_disables_itself_on_sm120(newest, newest_tree):
    p = newest["patches"][1]
    assert p["status"] == "ok" and p["where"] == "srt/distributed/device_communicators/torch_symm_mem.py:80"
    assert "the communicator disables itself instead of raising KeyError" in p["message"]
    assert "keys [9, 10] only" in p["message"] and "PR #24548" in p["message"]
    source = (newest_tree / "sglang/srt/distributed/device_communicators/torch_symm_mem.py").read_text().splitlines()
    assert "TORCH_SYMM_MEM_ALL_REDUCE_MAX_SIZES.get(" in source[79]  # line 80
    assert "if supported_max_sizes is None:" in source[82]


def test_0003_still_needed_the_backend_resolver_refuses_sm120(newest, newest_tree):
    p = newest["patches"][2]
    assert p["status"] == "fail" and p["where"] == "srt/layers/flashinfer_comm_fusion.py:48"
    assert "raises ValueError unless (get_platform().is_sm90 or get_platform().is_sm100)" in p["message"]
    assert p["hunks"] == [{"file": "sglang/srt/layers/communicator.py", "header": "", "reason": "not in this tree",
                           "lines": []}]  # fmt: skip
    assert not (newest_tree / "sglang/srt/layers/communicator.py").exists()


def test_0004_upstream_recognised_by_running_the_capture_rule(newest):
    p = newest["patches"][3]
    assert p["status"] == "ok" and p["where"] == "srt/models/deepseek_v2.py:3458"
    assert "ids [1, 29, 57] capture layers [2, 30, 58], ids [2, 30, 58] capture [2, 30, 58]" in p["message"]


def test_0005_still_needed_and_not_covered_by_the_0_5_9_patch(newest):
    p = newest["patches"][4]
    assert p["status"] == "fail" and p["where"] == "srt/entrypoints/engine.py:311"
    assert "the 0.5.9 patch does not cover the new logging" in p["message"]
    assert "built from server_args.resolved_dict() (srt/entrypoints/engine.py:174)" in p["message"]
    failed = {(h["file"], h["header"]) for h in p["hunks"]}
    assert ("sglang/srt/server_args.py", "@@ -401,8 +402,11 @@") in failed
    assert ("sglang/srt/entrypoints/http_server.py", "@@ -603,7 +603,7 @@") in failed
    assert len(p["hunks"]) == 14 and all(h["reason"].startswith("FAILED at ") for h in p["hunks"])


def test_a_version_is_fetched_into_the_cache_once(newest_wheel, tmp_path):
    """--sglang 0.5.23 takes the wheel from the cache (pip only when it is missing) and unpacks it once."""
    (tmp_path / "wheels").mkdir()
    shutil.copy(newest_wheel, tmp_path / "wheels" / newest_wheel.name)
    tree = release.resolve("0.5.23", cache=tmp_path)
    assert tree.version == "0.5.23" and tree.root == tmp_path / "trees" / newest_wheel.name.removesuffix(".whl")
    assert release.resolve("0.5.23", cache=tmp_path) == tree
    assert release.resolve(str(newest_wheel), cache=tmp_path) == tree  # the wheel file itself
    assert tree.release == newest_wheel.name  # a pristine copy, to be read


def test_a_pinned_version_is_the_pinned_wheel_for_its_own_tags(tmp_path, monkeypatch):
    """0.5.23's pinned wheel is for CPython 3.12 on manylinux_2_34: pip is asked for exactly that file whatever this
    Python is (a laptop's 3.11 would otherwise get no wheel or another one). pip stands in here: the download
    itself is the tests' wheel fetch (support/pinned_wheels.py runs this same code)."""
    pin = pins.pins()["sglang-0.5.23"]
    assert release.release_pin("0.5.23") == pin and release.release_pin("0.5.22") is None
    asked = []

    def pip(command, **_kw):
        asked.append(command)
        (Path(command[command.index("-d") + 1]) / pin["wheel"]).write_bytes(b"not the pinned bytes")
        return subprocess.CompletedProcess(command, 0, "", "")

    monkeypatch.setattr(release.subprocess, "run", pip)
    with pytest.raises(release.CheckFailed, match=f"pins {pin['sha256']}.*the release was replaced"):
        release.download("0.5.23", tmp_path)
    first, again = asked  # the index served other bytes twice, the second time past pip's cache
    assert first[first.index("--python-version") + 1] == "312" and "manylinux_2_34_x86_64" in first
    assert first[-1] == "sglang==0.5.23" and "--no-deps" in first and again == [*first[:-3], "--no-cache-dir",
                                                                                 *first[-3:]]  # fmt: skip
    assert [p.name for p in (tmp_path / "wheels").iterdir()] == [".download.lock"]  # nothing of it was kept


def test_a_damaged_cached_wheel_is_named_and_fetched_again(tmp_path, pristine_wheel, monkeypatch):
    """A wheel in the cache whose sha256 is not nix/pins.json's is damaged (a download an older version of this tool
    left cut short, the disk): it is never read, it is named as damaged, and the wheel is fetched again; the index is
    not blamed. pip stands in: it serves the real wheel (tests/test_cache_interrupts.py runs the real pip)."""
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    damaged = wheels / pins.pins()["sglang"]["wheel"]
    damaged.write_bytes(pristine_wheel.read_bytes()[:1000])

    def pip(command, **_kw):
        shutil.copy(pristine_wheel, Path(command[command.index("-d") + 1]) / damaged.name)
        return subprocess.CompletedProcess(command, 0, "", "")

    monkeypatch.setattr(release.subprocess, "run", pip)
    said = io.StringIO()
    monkeypatch.setattr(sys, "stderr", said)
    assert release.download("0.5.9", tmp_path) == damaged
    assert damaged.read_bytes() == pristine_wheel.read_bytes()
    assert f"{damaged} is damaged (sha256 " in said.getvalue() and "fetching it again" in said.getvalue()
    assert "replaced" not in said.getvalue()


@pytest.mark.parametrize("home", ["a file", "a directory of a file"])
def test_a_cache_that_cannot_be_written_says_which_and_how_to_move_it(run_cli, tmp_path, home):
    """HOME (and so ~/.cache) where nothing can be written: exit 2, naming the SGLang wheel cache and the variable
    that moves it, not a bare 'Permission denied'."""
    blocker = tmp_path / "blocker"
    blocker.write_text("")
    env = {**ENV, "HOME": str(blocker if home == "a file" else blocker / "home"), "XDG_CACHE_HOME": ""}
    result = run_cli("patch", "check", "--sglang", "0.5.23", env=env)
    assert result.returncode == 2, result.stderr
    assert "cannot write the SGLang wheel cache" in result.stderr and "XDG_CACHE_HOME=DIR" in result.stderr
    assert "Traceback" not in result.stderr


def test_a_release_copy_is_read_never_patched(run_cli, release_cache):
    """`patch apply --sglang 0.5.9` would patch the cache's pristine copy, which nothing runs: refused (2), the
    copy unchanged; verify reads it, and its hint names the SGLang that is served, not the cache."""
    refused = run_cli("patch", "apply", "--sglang", "0.5.9", env=release_cache)
    assert refused.returncode == 2 and "is not an SGLang anything runs" in refused.stderr
    assert "patch check --sglang 0.5.9" in refused.stderr
    verified = run_cli("patch", "verify", "--sglang", "0.5.9", env=release_cache)
    assert verified.returncode == 1 and verified.stdout.count("not applied") == len(series_names())
    assert "patch apply --sglang DIR, DIR being the SGLang 0.5.9 you serve" in verified.stderr
    assert run_cli("patch", "check", "--sglang", "0.5.9", env=release_cache).returncode == 0  # still pristine


# -- bad input ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("against", "message"),
    [
        ("{tmp}", "does not contain an SGLang source tree (expected sglang/srt/ in it"),
        ("{tmp}/missing.whl", "missing.whl: no such wheel file"),
        ("not-a-version", "is neither a directory, a .whl file nor an SGLang version"),
        ("0.0.999", "cannot fetch SGLang 0.0.999 from the package index"),
    ],
)
def test_bad_input_exits_2_with_a_message(run_cli, tmp_path, against, message):
    env = {**ENV, "XDG_CACHE_HOME": str(tmp_path / "cache"), "PIP_RETRIES": "0", "PIP_TIMEOUT": "10"}
    result = run_cli("patch", "check", "--sglang", against.format(tmp=tmp_path), env=env)
    assert result.returncode == 2, result.stdout + result.stderr
    assert message in result.stderr and "Traceback" not in result.stderr
    assert result.stdout == ""


def test_a_file_that_is_no_wheel_exits_2(run_cli, tmp_path):
    fake = tmp_path / "sglang-0.5.9-py3-none-any.whl"
    fake.write_text("not a zip")
    result = run_cli("patch", "check", "--sglang", str(fake), env={**ENV, "XDG_CACHE_HOME": str(tmp_path)})
    assert result.returncode == 2 and "cannot unpack" in result.stderr and "Traceback" not in result.stderr


# -- the docs' table per version ----------------------------------------------------------------


def doc_block(version: str) -> str:
    start, end = f"<!-- patch-check:{version}:start -->", f"<!-- patch-check:{version}:end -->"
    text = DOC.read_text()
    assert start in text and end in text, f"{DOC} has no {start} block"
    return text.split(start, 1)[1].split(end, 1)[0].strip()


@pytest.mark.parametrize(
    ("block", "series"),
    [("0.5.9", []), ("0.5.23", []), ("0.5.23-series-0.5.9", ["--series", str(SERIES_0_5_9)])],
)
def test_the_docs_table_is_the_check_output(run_cli, pristine_tree, newest_tree, block, series):
    tree = pristine_tree if block == "0.5.9" else newest_tree
    result = run_cli("patch", "check", "--sglang", str(tree), *series, "--markdown", env=ENV)
    table = result.stdout.strip()
    assert re.search(r"\| \*\*(applies|already upstream)\*\* \|", table)
    command = table.split("`")[1]  # the header names the command that made the table
    assert doc_block(block) == table, f"docs/upgrade.md is stale: {command} --markdown"
