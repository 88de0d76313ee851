"""Draft checks on target/draft pairs no test wrote by hand.

Hypothesis generates tiny pairs (any layer count, hidden size and vocabulary; either
convention; with defects: mismatched hidden size, an id past the target's layers, an
unregistered or non-draft architecture, a missing d2t, a wrong layer count or id count,
no ids at all). The expected verdicts and captured layers are derived here from first
principles (what SGLang 0.5.9 does, stated below), not from the implementation.

Then, for a few generated target sizes, the captured layers are measured on a real tiny
KimiK25 forward pass on CPU (eagle3_capture_driver.py): with patch 0004 they equal the
draft's intent in both conventions, and they equal what the probe predicted.
"""

from __future__ import annotations

import random
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sglang_eagle3.judging import draft_check
from sglang_eagle3.source.tree import locate
from support.capture import run_capture
from support.draft_fixtures import eagle3_draft_config, kimi_target, write_draft

# SGLang 0.5.9, stated independently of the code under test:
EAGLE3_DRAFTS = {"LlamaForCausalLMEagle3"}  # srt/models/llama_eagle3.py, its only EAGLE-3 draft class
EAGLE_DRAFTS = {"LlamaForCausalLMEagle"}  # one of the EAGLE (1/2) drafts (llama_eagle.py); EAGLE3 captures 3 states
AUX_STATES = 3  # its fc takes three target hidden states
DRAFT_LAYERS = 1  # and it accepts one layer
# Values it cannot build a draft from. transformers' LlamaConfig keeps a field given in config.json as it is,
# null included, and llama_eagle3.py uses target_hidden_size whenever it is there: Linear(None * 3, ...).
UNUSABLE = {
    "target_hidden_size": [None, "7168", 0], "hidden_size": [None, 7168.0], "num_attention_heads": [None, True],
    "intermediate_size": [None, -1], "hidden_act": [None, "gelu"], "rms_norm_eps": [None, "1e-5"],
}  # fmt: skip


def in_loop_order(layers):
    """DeepseekV2Model's loop captures each listed layer once, before running it, in layer order."""
    return sorted(set(layers))


def capture_0_5_9(ids, n):
    """DeepseekV2ForCausalLM.set_eagle3_layers_to_capture in 0.5.9: +1 to every given id."""
    return in_loop_order([2, n // 2, n - 3] if ids is None else [i + 1 for i in ids])


def capture_with_0004(ids, n):
    """With patch 0004 (upstream PR #25454): +1 only when the first id is 1."""
    if ids is None:
        return in_loop_order([2, n // 2, n - 3])
    return in_loop_order([i + 1 for i in ids] if ids[0] == 1 else ids)


def intent(ids):
    """The layer inputs a draft was trained on. First id 1: "output of layer i" = input of i + 1."""
    if ids is None or ids[0] < 1:
        return None
    return [i + 1 for i in ids] if ids[0] == 1 else list(ids)


def capturable(i, n):
    return 1 <= i <= n - 1  # the loop captures the input of layers 1..n-1 (layer 0 has no residual yet)


def expected(case) -> dict[str, str]:
    n, ids, registered = case["n"], case["ids"], case["arch"] in EAGLE3_DRAFTS
    if case["arch"] in EAGLE_DRAFTS:  # an EAGLE-1/2 draft under EAGLE3: the algorithm is wrong, the draft is
        # judged as what it is (EAGLE checks only its vocabulary)
        vocabulary = "ok" if case["draft_vocab_size_of"] == case["vocab"] else "fail"
        return {"algorithm": "fail", "architecture": "ok", "vocabulary": vocabulary}
    verdict = {"algorithm": "ok" if registered else "not_checked", "architecture": "ok" if registered else "fail"}
    if registered:
        verdict["layers"] = "ok" if case["draft_layers"] == DRAFT_LAYERS else "fail"
    verdict["hidden size"] = "ok" if case["width"] == case["hidden"] else "fail"
    verdict["vocabulary"] = "ok" if case["draft_vocab_size_of"] == case["vocab"] else "fail"
    reduced = case["draft_vocab"] < case["draft_vocab_size_of"]
    verdict["token mapping"] = "ok" if not reduced or case["d2t"] else "fail"
    wanted = intent(ids)
    if ids is None:
        verdict["aux layer ids"] = "warn"
    elif (
        (registered and len(ids) != AUX_STATES)
        or len(set(ids)) != len(ids)
        or (wanted and not all(capturable(i, n) for i in wanted))
    ):
        verdict["aux layer ids"] = "fail"
    elif wanted is None or ids != sorted(ids):
        verdict["aux layer ids"] = "warn"
    else:
        verdict["aux layer ids"] = "ok"
    captured = case["captured"]
    if not all(capturable(i, n) for i in captured):
        verdict["captured layers"] = "fail"
    elif wanted is None:
        verdict["captured layers"] = "warn"
    else:
        verdict["captured layers"] = "ok" if captured == wanted else "warn"
    return verdict


DEFECTS = ["hidden", "past_last_layer", "arch", "not_a_draft_class", "missing_d2t", "draft_layers", "id_count",
           "no_ids", "unsorted", "other_tokenizer", "unusable_field"]  # fmt: skip


@st.composite
def pairs(draw, defect: str | None):
    """A target/draft pair with ``defect`` (and perhaps one more, drawn)."""
    n = draw(st.integers(8, 96))
    hidden = draw(st.sampled_from([64, 2048, 4096, 7168]))
    vocab = draw(st.sampled_from([256, 32000, 129280, 163840]))
    defects = {defect} | draw(st.sets(st.sampled_from(DEFECTS), max_size=1)) - {None}
    output = draw(st.booleans())
    first = 1 if output else draw(st.integers(2, 4))
    last = n - 2 if output else n - 1  # the deepest id each convention can name
    rest = sorted(draw(st.lists(st.integers(first + 1, last), min_size=2, max_size=2, unique=True)))
    ids = [first, *rest]
    if "past_last_layer" in defects:
        ids[-1] = last + draw(st.integers(1, 3))
    if "id_count" in defects:
        ids = ids[:2] if draw(st.booleans()) else [*ids, ids[-1] + 1]
    if "unsorted" in defects and len(ids) == 3:
        ids = [ids[0], ids[2], ids[1]]
    if "no_ids" in defects:
        ids = None
    own_vocab = vocab + 1000 if "other_tokenizer" in defects else vocab  # the draft's vocab_size
    draft_vocab = draw(st.sampled_from([own_vocab, min(own_vocab, 32000), own_vocab // 2]))
    arch = "LlamaForCausalLMEagle3"
    if "arch" in defects:
        arch = draw(st.sampled_from(["Eagle3DeepseekV2ForCausalLM", "DeepseekV3ForCausalLMEagle3", "MyDraft"]))
    if "not_a_draft_class" in defects:
        arch = draw(st.sampled_from(["LlamaForCausalLM", "LlamaForCausalLMEagle", "DeepseekV3ForCausalLM"]))
    width = hidden + draw(st.sampled_from([-32, 32, 1024])) if "hidden" in defects else hidden
    use_target_field = draw(st.booleans())  # width given as target_hidden_size (draft's own size differs)
    unusable = {}
    if "unusable_field" in defects:
        name = draw(st.sampled_from(sorted(UNUSABLE)))
        unusable = {name: draw(st.sampled_from(UNUSABLE[name]))}
    return {
        "unusable": unusable,
        "n": n, "hidden": hidden, "vocab": vocab, "ids": ids, "arch": arch, "width": width,
        "draft_vocab_size_of": own_vocab, "draft_vocab": draft_vocab, "d2t": "missing_d2t" not in defects,
        "draft_layers": 2 if "draft_layers" in defects else 1,
        "config": eagle3_draft_config(
            ids, hidden=hidden // 2 if use_target_field else width, vocab=own_vocab, draft_vocab=draft_vocab,
            architectures=[arch], num_hidden_layers=2 if "draft_layers" in defects else 1,
            **{"target_hidden_size": width if use_target_field else ..., **unusable},
        ),
    }  # fmt: skip


def check(tree, arch, case) -> draft_check.DraftReport:
    with tempfile.TemporaryDirectory() as tmp:
        target = kimi_target(Path(tmp) / "target", layers=case["n"], hidden=case["hidden"], vocab=case["vocab"])
        d2t = case["draft_vocab"] if case["d2t"] else None
        draft = write_draft(Path(tmp) / "draft", case["config"], d2t_rows=d2t)
        return draft_check.check(locate(tree), str(draft), str(target), target_arch=arch)


def refused(tree, arch, case) -> bool:
    """A draft config with a value SGLang cannot build from is bad input, whatever else is wrong with the pair."""
    if not case["unusable"] or case["arch"] in EAGLE_DRAFTS:  # EAGLE drafts are checked for their vocabulary only
        return False
    (name,) = case["unusable"]
    with pytest.raises(draft_check.DraftInputError, match=rf"{name} must be .*, not "):
        check(tree, arch, case)
    return True


GENERATED = settings(
    max_examples=8,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
# Every defect is generated for each tree (with random sizes, ids and perhaps a second defect).
each_defect = pytest.mark.parametrize("defect", [None, *DEFECTS])


@each_defect
@GENERATED
@given(data=st.data())
def test_generated_pairs_on_the_patched_tree(patched_tree, defect, data):
    case = data.draw(pairs(defect))
    if refused(patched_tree, "KimiK25ForConditionalGeneration", case):
        return
    report = check(patched_tree, "KimiK25ForConditionalGeneration", case)
    if case["arch"] in EAGLE_DRAFTS:  # judged as an EAGLE draft: no layer capture for it
        assert report.capture is None and {f.name: f.status for f in report.findings} == expected(case)
        return
    case["captured"] = capture_with_0004(case["ids"], case["n"])
    assert report.capture.captured == case["captured"]
    assert report.capture.without_0004 == capture_0_5_9(case["ids"], case["n"])
    assert {f.name: f.status for f in report.findings} == expected(case), report.findings
    assert report.verdict == max(expected(case).values(), key=["ok", "not_checked", "warn", "fail"].index)


@each_defect
@GENERATED
@given(data=st.data())
def test_generated_pairs_on_the_pristine_tree(pristine_tree, defect, data):
    case = data.draw(pairs(defect))
    if refused(pristine_tree, "DeepseekV3ForCausalLM", case):
        return
    report = check(pristine_tree, "DeepseekV3ForCausalLM", case)
    if case["arch"] in EAGLE_DRAFTS:  # judged as an EAGLE draft: no layer capture for it
        assert report.capture is None and {f.name: f.status for f in report.findings} == expected(case)
        return
    case["captured"] = capture_0_5_9(case["ids"], case["n"])
    assert report.capture.captured == case["captured"]
    assert report.capture.with_0004 == capture_with_0004(case["ids"], case["n"])
    assert {f.name: f.status for f in report.findings} == expected(case), report.findings


# -- measured on a real model ---------------------------------------------------------------------


def valid_ids(rng: random.Random, n: int, output: bool) -> list[int]:
    first, last = (1, n - 2) if output else (rng.randint(2, 3), n - 1)
    return [first, *sorted(rng.sample(range(first + 1, last + 1), 2))]


@pytest.mark.parametrize("seed", [11, 29])
def test_generated_targets_capture_the_drafts_intent_on_a_real_cpu_model(patched_tree, seed):
    rng = random.Random(seed)
    n = rng.randint(6, 12)
    cases = {"output": valid_ids(rng, n, output=True), "input": valid_ids(rng, n, output=False)}
    measured = run_capture(patched_tree, n, cases)
    for name, ids in cases.items():
        case = measured["cases"][name]
        inputs = [x[0] for x in case["inputs_of"]]
        assert all(len(x) == 1 for x in case["inputs_of"]) and case["finite"]
        assert inputs == intent(ids), (n, name, ids, case)
        # ... which is what the probe predicted for this tree from the draft's config.
        report = check(patched_tree, "KimiK25ForConditionalGeneration",
                       {"n": n, "hidden": 64, "vocab": 256, "draft_vocab": 256, "d2t": True, "ids": ids,
                        "config": eagle3_draft_config(ids, hidden=64, vocab=256, draft_vocab=256)})  # fmt: skip
        assert report.capture.captured == inputs == report.capture.intended
        assert report.finding("captured layers").status == "ok"
