"""Where the flake's locked inputs come from: the staged cache ($EAGLE3_TESTS_NIX_INPUTS, default
~/.cache/sglang-eagle3/nix-inputs). Without them the suite still passes and says, in one line just
above pytest's count, that the flake was NOT evaluated; when CI requires the evaluation, a missing
input fails the run."""

from __future__ import annotations

import os
import subprocess
import sys

from conftest import REPO
from support import flake_eval, harness_env

FLAKE_EVAL = REPO / "tests" / "support" / "flake_eval.py"


def run_pytest(environment: dict[str, str]) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != harness_env.REQUIRE_FLAKE_EVAL} | environment
    command = [sys.executable, "-m", "pytest", "-q", "-n", "0", "-p", "no:cacheprovider", "tests/test_flake.py"]
    return subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)


def test_the_ci_question_names_what_is_missing_and_how_to_stage_it(tmp_path):
    result = subprocess.run(
        [sys.executable, str(FLAKE_EVAL)], env={**os.environ, harness_env.NIX_INPUTS: str(tmp_path)},
        capture_output=True, text=True,
    )  # fmt: skip
    assert result.returncode == 1
    for node in ("uv2nix", "pyproject-nix", "pyproject-build-systems"):
        assert f"{flake_eval.TARBALLS[node]}{flake_eval.locked_rev(node)}.tar.gz" in result.stdout
    assert "stage-inputs.sh" in result.stdout and str(tmp_path) in result.stdout


def test_without_inputs_the_suite_passes_and_says_the_flake_was_not_evaluated(tmp_path):
    result = run_pytest({harness_env.NIX_INPUTS: str(tmp_path)})
    assert result.returncode == 0, result.stdout[-2000:]
    last = result.stdout.strip().splitlines()[-2:]
    assert last[0].startswith("NOTE: the flake was NOT evaluated: the flake's locked inputs are not staged in"), last
    assert "skipped" in last[1]


def test_when_ci_requires_the_evaluation_missing_inputs_fail_the_run(tmp_path):
    result = run_pytest({harness_env.NIX_INPUTS: str(tmp_path), harness_env.REQUIRE_FLAKE_EVAL: "1"})
    assert result.returncode != 0
    assert "EAGLE3_TESTS_REQUIRE_FLAKE_EVAL is set, but the flake cannot be evaluated" in result.stdout + result.stderr


def test_staged_inputs_are_found_by_their_locked_revisions():
    """The same cache serves the flake evaluation and the module tests (nixpkgs' lib, uv2nix, pyproject.nix)."""
    tarballs = flake_eval.staged_tarballs()
    assert set(tarballs) == {*flake_eval.TARBALLS, "nixpkgs.lib"}
    for node in flake_eval.TARBALLS:
        assert tarballs[node].name == f"{flake_eval.TARBALLS[node]}{flake_eval.locked_rev(node)}.tar.gz"
        assert tarballs[node].parent == flake_eval.INPUTS
