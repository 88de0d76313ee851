"""The test harness's own environment variables: EAGLE3_TESTS_*.

They live outside SGLANG_EAGLE3_*, the server settings' prefix (the settings loader reads every
variable under it and refuses a name that is no setting), so the package knows none of them and a
CLI the tests start never takes one for a setting. Their former names (SGLANG_EAGLE3_NIX_INPUTS, as
../shared/nix/stage-inputs.sh still suggests, ...) are read as well, and `adopt_former_names`
moves them to the new ones when pytest starts, before any CLI runs.
"""

from __future__ import annotations

import os

CACHE = "EAGLE3_TESTS_CACHE"  # the pinned wheels (default ~/.cache/sglang-eagle3-tests)
SGLANG_WHEEL = "EAGLE3_TESTS_SGLANG_WHEEL"  # the pristine 0.5.9 wheel, given by the Nix check (no network there)
NIX_INPUTS = "EAGLE3_TESTS_NIX_INPUTS"  # the flake's staged inputs (default ~/.cache/sglang-eagle3/nix-inputs)
REQUIRE_FLAKE_EVAL = "EAGLE3_TESTS_REQUIRE_FLAKE_EVAL"  # 1: a flake that cannot be evaluated fails (.ci/run)
SHARED = "EAGLE3_TESTS_SHARED"  # .ci/run: where ../shared is
BASELINE_URL = "EAGLE3_TESTS_BASELINE_URL"  # the live A/B gate's servers (docs/bench.md)
EAGLE3_URL = "EAGLE3_TESTS_EAGLE3_URL"
THRESHOLD = "EAGLE3_TESTS_THRESHOLD"
K8S_CRDS = "EAGLE3_TESTS_K8S_CRDS"  # the staged CRD schemas (default ~/.cache/sglang-eagle3/k8s-crds)
REQUIRE_K8S_CRDS = "EAGLE3_TESTS_REQUIRE_K8S_CRDS"  # 1: CRD schemas that are not staged fail (.ci/run)

FORMER = {
    CACHE: "SGLANG_EAGLE3_TEST_CACHE",
    SGLANG_WHEEL: "SGLANG_EAGLE3_SGLANG_WHEEL",
    NIX_INPUTS: "SGLANG_EAGLE3_NIX_INPUTS",
    REQUIRE_FLAKE_EVAL: "SGLANG_EAGLE3_REQUIRE_FLAKE_EVAL",
    SHARED: "SGLANG_EAGLE3_SHARED",
    BASELINE_URL: "SGLANG_EAGLE3_BASELINE_URL",
    EAGLE3_URL: "SGLANG_EAGLE3_EAGLE3_URL",
    THRESHOLD: "SGLANG_EAGLE3_THRESHOLD",
    K8S_CRDS: "SGLANG_EAGLE3_K8S_CRDS",
    REQUIRE_K8S_CRDS: "SGLANG_EAGLE3_REQUIRE_K8S_CRDS",
}


def get(name: str, default: str | None = None) -> str | None:
    """The harness variable ``name``, else its former name's value, else ``default``."""
    return os.environ.get(name) or os.environ.get(FORMER[name]) or default


def adopt_former_names(environ=os.environ) -> None:
    """Each variable still set under its former name moves to its EAGLE3_TESTS_ name (one given under the new
    name wins), so the CLIs the tests start never see a SGLANG_EAGLE3_ name that is no setting."""
    for name, former in FORMER.items():
        if former in environ:
            value = environ.pop(former)
            environ.setdefault(name, value)
