"""The GPU replay of each stack's traced FlashInfer calls (nix/scripts/flashinfer-replay.py), what can run without one.

- the plan is the trace: for every stack and traced GPU, --list names exactly the (step, geometry) runs the trace
  holds a FlashInfer call for, each with the modules the trace names, and each has a replay;
- a step the trace grows with no replay fails the run (exit 1) naming it; bad input exits 2 with the fix;
- a step passes only when its outputs match and it mapped exactly the traced modules, all prebuilt.
The replays themselves need a CUDA GPU and the stack's FlashInfer; docs/gpu-host.md (j) has what they printed, and
docs/gpu-host-figures.json `flashinfer_replay_sm90` each run's result: it must still be the trace's plan, so a trace
that changes (a new SGLang, a new geometry) fails here until the GPU proof is run again.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from conftest import REPO
from support.scripts import load_script

SCRIPT = REPO / "nix" / "scripts" / "flashinfer-replay.py"
STACKS = ("0.5.9", "0.5.23")


def trace(stack: str) -> dict:
    return json.loads((REPO / "nix" / "stacks" / f"sglang-{stack}" / "flashinfer-calls.json").read_text())


def replay(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=60)


def traced_runs(data: dict, capability: str) -> dict[tuple[str, str], set[str]]:
    """(step, geometry) -> modules, read from the trace's own labels ('9.0/gqa replay', '12.0')."""
    runs: dict[tuple[str, str], set[str]] = {}
    for step, entry in data["steps"].items():
        for call, labels in entry["calls"].items():
            for label in labels:
                cap, _, geometry = label.split()[0].partition("/")
                if cap == capability:
                    runs.setdefault((step, geometry or "target"), set()).add(call.split(" | ")[0])
    return runs


@pytest.mark.parametrize("stack", STACKS)
def test_the_plan_is_every_traced_run_with_its_modules(stack):
    data = trace(stack)
    for capability in data["traced_on"]:
        done = replay("--stack", stack, "--capability", capability, "--list")
        assert done.returncode == 0, done.stderr
        listed = {}
        for line in done.stdout.splitlines():
            head, _, modules = line.partition(": ")
            step, _, geometry = head.partition(" [")
            listed[(step, geometry.rstrip("]"))] = set(modules.split(", "))
        expected = traced_runs(data, capability)
        assert listed == expected
        # the draft runs on both geometries, the target once
        assert {g for (s, g) in listed if s.startswith("draft.")} == {"mha", "gqa"}


@pytest.mark.parametrize("stack", STACKS)
def test_the_recorded_gpu_replay_is_the_current_traces_plan_and_passed(stack):
    recorded = json.loads((REPO / "docs" / "gpu-host-figures.json").read_text())["flashinfer_replay_sm90"][stack]
    assert recorded["capability"] == "9.0" and recorded["jit"] is False
    assert recorded["flashinfer"] == trace(stack)["flashinfer"]
    runs = traced_runs(trace(stack), "9.0")
    expected = {f"{step} [{geometry}]": modules for (step, geometry), modules in runs.items()}
    assert set(recorded["runs"]) == set(expected), "the trace moved on: run nix/scripts/flashinfer-gpu-proof.sh again"
    for run, result in recorded["runs"].items():
        assert result["ok"], run
        # every module came from the prebuilt set, and they are exactly the ones the trace names
        assert all(m.endswith(" (aot)") for m in result["mapped"]), run
        assert {m.removesuffix(" (aot)") for m in result["mapped"]} == expected[run], run
    assert len({m for r in recorded["runs"].values() for m in r["mapped"]}) == recorded["modules_built"]


def test_a_traced_step_without_a_replay_fails_and_is_named(tmp_path):
    data = trace("0.5.23")
    data["steps"]["draft.new_mode"] = data["steps"]["draft.decode"]
    calls = tmp_path / "calls.json"
    calls.write_text(json.dumps(data))
    done = replay("--calls", str(calls), "--capability", "9.0", "--list")
    assert done.returncode == 1
    assert "no replay for the traced step(s) draft.new_mode" in done.stderr


@pytest.mark.parametrize(
    ("args", "says"),
    [
        ((), "give --stack"),
        (("--calls", "/nonexistent/calls.json", "--capability", "9.0"), "not a FlashInfer call trace"),
        (("--stack", "0.5.9", "--capability", "9.0", "--steps", "draft.nothing"), "made no FlashInfer call on 9.0"),
    ],
)
def test_bad_input_exits_2_with_what_to_do(args, says):
    done = replay(*args)
    assert done.returncode == 2, done.stderr
    assert says in done.stderr and "Traceback" not in done.stderr


def test_a_capability_the_trace_did_not_run_is_a_failure():
    done = replay("--stack", "0.5.9", "--capability", "8.0", "--list")
    assert done.returncode == 1 and "traced: " in done.stderr


def test_a_step_passes_only_on_matching_outputs_and_the_traced_prebuilt_modules():
    judge = load_script(SCRIPT).judge
    entry = {"modules": ["cascade", "m"]}
    good = {"checks": [{"check": "c", "ok": True}], "mapped": ["cascade (aot)", "m (aot)"]}
    assert judge(entry, good) == []
    assert judge(entry, {**good, "checks": [{"check": "c", "ok": False}]})
    assert judge(entry, {**good, "mapped": ["m (aot)"]})  # a traced module not loaded
    assert judge(entry, {**good, "mapped": ["cascade (aot)", "m (aot)", "x (aot)"]})  # one the trace does not name
    assert judge(entry, {**good, "mapped": ["cascade (jit)", "m (aot)"]})  # compiled, not prebuilt
    assert judge(entry, {"error": "MissingJITCacheError: m", "mapped": []})
    assert judge(entry, {"checks": [], "mapped": ["cascade (aot)", "m (aot)"]})  # nothing compared


def test_replaying_on_a_gpu():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU and the stack's FlashInfer: nix/scripts/flashinfer-gpu-proof.sh on the GPU host")
    done = replay("--stack", "0.5.9", "--allow-jit")
    assert done.returncode == 0, done.stdout + done.stderr
