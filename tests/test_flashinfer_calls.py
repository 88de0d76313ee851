"""The FlashInfer calls of SGLang's EAGLE-3 path, traced from SGLang's own code (nix/stacks/*/flashinfer-calls.json).

- each stack's data is what a fresh trace of the real wheels gives: its SGLang (patched as Nix patches it) and its
  FlashInfer, on each GPU of nix/flashinfer-trace.json and each draft geometry, with the project's settings
  (python -m sglang_eagle3_audits --check --only flashinfer-calls, which also fails on a step that failed, a module
  no FlashInfer generator made, and a FlashInfer name the attention backends import that no step used and no reason
  explains);
- every step the tracer defines ran on every GPU and draft, and every module is loaded by one, made by a generator;
- what the audit refuses, it refuses: each kind of unexplained finding, planted in data (problems()).
The trace itself runs on the CPU (nix/scripts/flashinfer-trace.py says what it simulates and why).
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys

import pytest
from conftest import CACHE, REPO
from sglang_eagle3 import stacks
from sglang_eagle3_audits import flashinfer_calls as audit

TRACE = REPO / "nix" / "scripts" / "flashinfer-trace.py"
INPUTS = json.loads((REPO / "nix" / "flashinfer-trace.json").read_text())
STACKS = stacks.versions()


def data(stack: str) -> dict:
    return json.loads((REPO / stacks.stacks()[stack].data / audit.AUDIT.data).read_text())


def traced_steps() -> list[str]:
    """The steps nix/scripts/flashinfer-trace.py defines (its @step decorators), read from its source."""
    tree = ast.parse(TRACE.read_text())
    return [
        d.args[0].value for node in ast.walk(tree) if isinstance(node, ast.FunctionDef)
        for d in node.decorator_list
        if isinstance(d, ast.Call) and getattr(d.func, "id", None) == "step"
    ]  # fmt: skip


def runs(step: str) -> set[str]:
    """Where a step runs: a target step on every GPU, a draft step on every GPU with every draft geometry."""
    if step.startswith("target."):
        return set(INPUTS["gpus"])
    return {f"{gpu}/{draft}" for gpu in INPUTS["gpus"] for draft in INPUTS["drafts"] if draft != "rest"}


@pytest.mark.parametrize("stack", STACKS)
def test_the_data_is_a_fresh_trace_of_the_stack(stack, tmp_path):
    """The audit traces again and finds its data; what the traces wrote (FlashInfer's workspace, the models' configs,
    the rendezvous files: each run left some in /tmp) is gone when it ends."""
    command = ["-m", "sglang_eagle3_audits", "--check", "--only", "flashinfer-calls", "--stack", stack]
    result = subprocess.run([sys.executable, *command, "--cache", str(CACHE)], capture_output=True, text=True,
                            env={**os.environ, "TMPDIR": str(tmp_path)}, timeout=1800)  # fmt: skip
    assert result.returncode == 0, result.stderr[-5000:]
    # torchinductor_<user>: torch's own compile cache, which torch keeps in the temporary directory across runs
    assert [p.name for p in tmp_path.iterdir() if not p.name.startswith("torchinductor_")] == []


@pytest.mark.parametrize("stack", STACKS)
def test_every_step_ran_on_every_gpu_and_draft(stack):
    steps = data(stack)["steps"]
    assert sorted(steps) == sorted(traced_steps())
    for name, entry in steps.items():
        ran = {on for ons, outcome in entry["outcomes"].items() if outcome["ok"] for on in ons.split(", ")}
        assert ran == runs(name), name
    # The draft geometries do what they are there for: one decodes on tensor cores, the other does not.
    decode = {on: outcome["tensor_cores"] for ons, outcome in steps["draft.decode"]["outcomes"].items()
              for on in ons.split(", ")}  # fmt: skip
    assert {on.split("/")[1] for on, tc in decode.items() if tc} == {"gqa"}
    assert {on.split("/")[1] for on, tc in decode.items() if not tc} == {"mha"}


@pytest.mark.parametrize("stack", STACKS)
def test_every_module_is_loaded_by_a_step_and_made_by_a_generator(stack):
    found = data(stack)
    for name, module in found["modules"].items():
        assert module["generator"] and module["generator"].startswith("flashinfer."), name
        assert set(module["needed_on"]) <= set(INPUTS["gpus"]) and module["needed_on"], name
        for step in module["steps"]:
            assert any(call.startswith(name + " | ") for call in found["steps"][step]["calls"]), (name, step)
    # Which FlashInfer backend a call runs depends on the GPU: the trace lists each GPU's own modules.
    for capability in INPUTS["gpus"]:
        assert any(capability in m["needed_on"] for m in found["modules"].values()), capability


def test_the_audit_refuses_what_nothing_explains():
    planted = {
        "steps": {"draft.decode": {"outcomes": {"9.0/mha": {"ok": False, "error": "RuntimeError: planted"}},
                                   "calls": {}, "what": ""}},
        "modules": {"m1": {"generator": None, "args": []},
                    "m2": {"generator": "flashinfer.jit:gen_x", "args": [{"unresolved": "object"}]}},
        "imports": {"srt/layers/attention/flashinfer_backend.py": {"flashinfer.unused_name": []}},
    }  # fmt: skip
    found = audit.problems(planted, {"unused_imports": {"flashinfer.no_longer_imported": "a stale reason"}})
    assert any("step draft.decode failed on 9.0/mha: RuntimeError: planted" in p for p in found)
    assert any("module m1: no FlashInfer generator made it" in p for p in found)
    assert any("module m2: a generator argument the data cannot hold" in p for p in found)
    assert any("imports flashinfer.unused_name, which no traced step used" in p for p in found)
    assert any("explains flashinfer.no_longer_imported, which the backends no longer import" in p for p in found)
    explained = {"failing_steps": {"draft.decode": "why"}, "unused_imports": {"flashinfer.unused_name": "why"}}
    assert [p for p in audit.problems(planted, explained) if "draft.decode" in p or "unused_name" in p] == []


def test_a_name_is_used_when_a_call_went_through_it():
    calls = {
        "steps": {
            "s": {
                "calls": {
                    "m | plan | BatchPrefillWithRaggedKVCacheWrapper.plan | srt/x.py:1": [],
                    "c | merge_state | flashinfer.cascade.merge_state | srt/y.py:2": [],
                }
            }
        }
    }
    assert audit.used("flashinfer.BatchPrefillWithRaggedKVCacheWrapper", calls) == ["s"]
    assert audit.used("flashinfer.cascade.merge_state", calls) == ["s"]
    assert audit.used("flashinfer.BatchPrefillWithPagedKVCacheWrapper", calls) == []


def test_docs_show_the_module_tables_of_the_data():
    tables = subprocess.run([sys.executable, "-m", "sglang_eagle3_audits", "--markdown", "flashinfer-calls"],
                            capture_output=True, text=True, check=True).stdout.strip()  # fmt: skip
    doc = (REPO / "docs" / "nix.md").read_text()
    assert f"<!-- flashinfer-modules:start -->\n{tables}\n<!-- flashinfer-modules:end -->" in doc, (
        "run python -m sglang_eagle3_audits --write --docs --only flashinfer-calls"
    )
