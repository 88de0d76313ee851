"""Delegation on real code: a tiny, real KimiK25ForConditionalGeneration built on CPU.

Each tree (patched, pristine) is imported in its own subprocess by kimi_cpu_driver.py,
which reports what each EAGLE-3 method did to the real inner DeepseekV3ForCausalLM.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import STAND_INS

DRIVER = Path(__file__).parent / "support" / "drivers" / "kimi_cpu_driver.py"
NUM_LAYERS = 8  # TEXT_CONFIG["num_hidden_layers"] in the driver


def run_driver(tree: Path) -> dict:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tree), str(STAND_INS)])}
    result = subprocess.run([sys.executable, str(DRIVER)], capture_output=True, text=True, env=env, timeout=600)
    assert result.returncode == 0, f"driver failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def patched(patched_tree):
    return run_driver(patched_tree)


@pytest.fixture(scope="module")
def pristine(pristine_tree):
    return run_driver(pristine_tree)


def test_wrapper_holds_a_real_deepseek_v3(patched):
    assert patched["inner_class"] == "DeepseekV3ForCausalLM"


def test_get_embed_and_head_returns_the_inner_models_own_tensors(patched):
    result = patched["get_embed_and_head"]
    assert result["ok"], result.get("traceback")
    assert result["embed_is_inner"] and result["head_is_inner"]
    assert result["embed_shape"] == [256, 64]


def test_set_eagle3_layers_to_capture_default_layers(patched):
    result = patched["set_eagle3_layers_to_capture_default"]
    assert result["ok"], result.get("traceback")
    assert result["before"] == {"capture_aux_hidden_states": False, "layers_to_capture": []}
    # DeepSeek's default: layers [2, n // 2, n - 3]; the wrapper must give exactly that.
    expected = {"capture_aux_hidden_states": True, "layers_to_capture": [2, NUM_LAYERS // 2, NUM_LAYERS - 3]}
    assert result["via_wrapper"] == expected == result["direct"]


def test_set_eagle3_layers_to_capture_given_ids(patched):
    result = patched["set_eagle3_layers_to_capture_ids"]
    assert result["ok"], result.get("traceback")
    # Given ids, SGLang captures id + 1 (the output of layer i-1 feeds layer i).
    expected = {"capture_aux_hidden_states": True, "layers_to_capture": [2, 4, 6]}
    assert result["via_wrapper"] == expected == result["direct"]


def test_set_embed_and_head_replaces_the_inner_tensors(patched):
    result = patched["set_embed_and_head"]
    assert result["ok"], result.get("traceback")
    assert result["embed_replaced"] and result["head_replaced"] and result["roundtrip"]


@pytest.mark.parametrize(
    "key, method",
    [
        ("get_embed_and_head", "get_embed_and_head"),
        ("set_eagle3_layers_to_capture_default", "set_eagle3_layers_to_capture"),
        ("set_eagle3_layers_to_capture_ids", "set_eagle3_layers_to_capture"),
        ("set_embed_and_head", "set_embed_and_head"),
    ],
)
def test_unpatched_source_fails_the_way_users_saw_it(pristine, key, method):
    result = pristine[key]
    assert not result["ok"]
    assert result["error"] == (f"AttributeError: 'KimiK25ForConditionalGeneration' object has no attribute '{method}'")
