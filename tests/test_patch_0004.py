"""Patch 0004 on real code: a tiny KimiK25 (DeepSeek-V3 inside) built on CPU runs a real forward pass.

eagle3_capture_driver.py records every decoder layer's input and output with hooks and
reports, for each hidden state SGLang hands to the draft, which layer's input (and output)
it is, bit for bit. A draft in the "input to layer i" convention names [2, n//2, n-3]
and must get exactly the inputs of those layers; one in the "output of layer i"
convention names [1, n//2-1, n-4] and must get those layers' outputs (the same states).
"""

from __future__ import annotations

import pytest
from support.capture import run_capture

N = 8  # layers of the tiny model


CASES = {
    "default": None,  # the draft names no layers
    "input_convention": [2, N // 2, N - 3],
    "output_convention": [1, N // 2 - 1, N - 4],
    "input_convention_last_layer": [2, N // 2, N - 1],
    "first_id_zero": [0, N // 2, N - 3],
}


@pytest.fixture(scope="module")
def patched(patched_tree):
    return run_capture(patched_tree, N, CASES)


@pytest.fixture(scope="module")
def pristine(pristine_tree):
    return run_capture(pristine_tree, N, CASES)


def single(layer_lists: list[list[int]]) -> list[int]:
    """Each captured state must be one layer's input (or output), not ambiguous."""
    assert all(len(x) == 1 for x in layer_lists), layer_lists
    return [x[0] for x in layer_lists]


def test_patched_tree_runs_through_the_kimi_wrapper(patched):
    assert patched["set_via"] == "wrapper"  # patch 0001 forwards to the inner DeepSeek-V3
    for name in ("default", "input_convention", "output_convention"):
        assert patched["cases"][name]["finite"], name


def test_input_convention_draft_gets_the_inputs_of_the_layers_it_names(patched):
    case = patched["cases"]["input_convention"]
    assert single(case["inputs_of"]) == [2, N // 2, N - 3]


def test_output_convention_draft_gets_the_outputs_of_the_layers_it_names(patched, pristine):
    for tree in (patched, pristine):  # first id 1: 0004 changes nothing
        case = tree["cases"]["output_convention"]
        assert single(case["outputs_of"]) == [1, N // 2 - 1, N - 4]
        assert case["layers_to_capture"] == [2, N // 2, N - 3]


def test_default_capture_is_unchanged(patched, pristine):
    for tree in (patched, pristine):
        assert single(tree["cases"]["default"]["inputs_of"]) == [2, N // 2, N - 3]


def test_pristine_tree_is_off_by_one_for_the_input_convention(pristine):
    case = pristine["cases"]["input_convention"]
    assert single(case["inputs_of"]) == [3, N // 2 + 1, N - 2]


def test_the_last_layers_input_is_captured_only_with_the_patch(patched, pristine):
    assert single(patched["cases"]["input_convention_last_layer"]["inputs_of"]) == [2, N // 2, N - 1]
    # 0.5.9 asks for layer n, which the loop never reaches: the draft gets two states, not three.
    case = pristine["cases"]["input_convention_last_layer"]
    assert case["layers_to_capture"][-1] == N and single(case["inputs_of"]) == [3, N // 2 + 1]


def test_an_input_of_layer_zero_cannot_be_captured(patched):
    # The residual stream does not exist before layer 0; the probe calls this NOT READY.
    case = patched["cases"]["first_id_zero"]
    assert case["layers_to_capture"][0] == 0
    assert case["error"].startswith("TypeError") and "NoneType" in case["error"]
