"""The rendered argv goes through SGLang 0.5.9's own parser and gives back the settings' values."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import STAND_INS
from sglang_eagle3.serving import launch_plan, settings

DRIVER = Path(__file__).parent / "support" / "drivers" / "sglang_parser_driver.py"

# One case per field (or group of fields that must change together), each away from its default.
CASES: dict[str, dict] = {
    "model_path": {"model_path": "/models/kimi-k2.5-nvfp4"},
    "revision": {"revision": "5a7d2c1e9b0f4a3c8d6e1f2a4b7c9d0e3f5a6b8c"},
    "served_model_name": {"served_model_name": "kimi-k2.5"},
    "trust_remote_code": {"trust_remote_code": False},
    "context_length": {"context_length": 32768},
    "speculative_algorithm": {"speculative_algorithm": "EAGLE"},
    "speculative_draft_model_path": {"speculative_draft_model_path": "/models/kimi-eagle3"},
    "speculative_draft_model_revision": {"speculative_draft_model_revision": "v1.0"},
    "speculative_steps": {"speculative_num_steps": 5, "speculative_num_draft_tokens": 6},
    "speculative_topk": {"speculative_eagle_topk": 4, "speculative_num_draft_tokens": 8},
    "speculative_draft_attention_backend": {"speculative_draft_attention_backend": "triton"},
    "tp_size": {"tp_size": 4},
    "multi_node": {"nnodes": 2, "node_rank": 1, "dist_init_addr": "node0:50000"},
    "mem_fraction_static": {"mem_fraction_static": 0.85},
    "cuda_graph_max_bs": {"cuda_graph_max_bs": 16},
    "max_running_requests": {"max_running_requests": 8},
    "attention_backend": {"attention_backend": "triton"},
    "enable_torch_symm_mem": {"enable_torch_symm_mem": False},
    "enable_flashinfer_allreduce_fusion": {"enable_flashinfer_allreduce_fusion": False},
    "host": {"host": "0.0.0.0"},
    "port": {"port": 31000},
    "enable_metrics": {"enable_metrics": False},
    "extra_args": {"extra_args": ["--log-level", "debug", "--disable-radix-cache"]},
}
FLAGGED = [name for name in settings.ServerSettings.model_fields if settings.field_flag(name)]


def all_settings() -> dict[str, settings.ServerSettings]:
    built = {"default": settings.load(environ={}), "baseline": settings.load(environ={}, profile="baseline")}
    for name, values in CASES.items():
        built[name] = settings.ServerSettings(**values)
    return built


@pytest.fixture(scope="module")
def parsed(pristine_tree):
    cases = {name: launch_plan.sglang_args(s) for name, s in all_settings().items()}
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(pristine_tree), str(STAND_INS)])}
    result = subprocess.run(
        [sys.executable, str(DRIVER)], input=json.dumps(cases), capture_output=True, text=True, env=env, timeout=600
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_every_flagged_field_has_a_case_away_from_its_default():
    defaults = settings.ServerSettings()
    changed = {f for s in all_settings().values() for f in FLAGGED if getattr(s, f) != getattr(defaults, f)}
    assert changed == set(FLAGGED)


@pytest.mark.parametrize("case", ["default", "baseline", *CASES])
def test_sglang_parses_the_rendered_argv_back_to_the_same_values(parsed, case):
    s = all_settings()[case]
    got = parsed[case]
    assert "__error__" not in got, got
    for name in FLAGGED:
        value = getattr(s, name)
        # Unset values, and every speculative_* when speculation is off, are left to SGLang's default.
        unset = value is None or (name.startswith("speculative_") and s.speculative_algorithm is None)
        expected = parsed["__defaults__"][name] if unset else value
        assert got[name] == expected, f"{case}: {name} rendered as {value!r}, SGLang parsed {got[name]!r}"


def test_extra_args_reach_sglang(parsed):
    assert parsed["extra_args"]["log_level"] == "debug"
    assert parsed["extra_args"]["disable_radix_cache"] is True


def test_default_is_the_users_tuned_configuration(parsed):
    got = parsed["default"]
    assert got["model_path"] == "nvidia/Kimi-K2.5-NVFP4"
    assert got["speculative_draft_model_path"] == "AQ-MedAI/Kimi-K25-eagle3"
    assert (got["tp_size"], got["speculative_algorithm"]) == (8, "EAGLE3")
    assert (got["speculative_num_steps"], got["speculative_eagle_topk"], got["speculative_num_draft_tokens"]) == (
        3,
        1,
        4,
    )
    assert got["attention_backend"] == "flashinfer"
    assert got["enable_torch_symm_mem"] and got["enable_flashinfer_allreduce_fusion"]
    assert got["trust_remote_code"] and got["enable_metrics"]
    assert (got["host"], got["port"]) == ("127.0.0.1", 30000)


def test_baseline_is_the_same_server_without_speculation(parsed):
    default, baseline = parsed["default"], parsed["baseline"]
    assert baseline["speculative_algorithm"] is None and baseline["speculative_draft_model_path"] is None
    differing = {k for k in default if default[k] != baseline[k]}
    assert differing == {
        "speculative_algorithm",
        "speculative_draft_model_path",
        "speculative_num_steps",
        "speculative_eagle_topk",
        "speculative_num_draft_tokens",
    }
