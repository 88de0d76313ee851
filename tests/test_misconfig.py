"""The speculative-decoding misconfigurations users hit (issue 19), each caught before any weights load.

Each rule is read in SGLang 0.5.9's real source (the unpacked wheel) at the file:line the message quotes;
the expected outcomes of generated cases are derived here from what that source does, not from the code
under test.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sglang_eagle3.judging import draft_check, preflight
from sglang_eagle3.serving import settings as server_settings
from sglang_eagle3.source import attention_backends, eagle3_source, sglang_source
from sglang_eagle3.source.source_index import SourceIndex
from support.bench_fixtures import free_port
from support.draft_fixtures import eagle3_draft_config, kimi_target, write_config, write_draft
from support.gpus import fake_nvidia_smi

GENERATED = settings(
    max_examples=60, deadline=None, derandomize=True, database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)  # fmt: skip


def source_lines(tree, where: str) -> str:
    """The text of ``srt/...py:A-B`` (or ``:A``) in an unpacked tree."""
    path, _, lines = where.partition(":")
    first, _, last = lines.partition("-")
    text = (tree / "sglang" / path).read_text().splitlines()
    return "\n".join(text[int(first) - 1 : int(last or first)])


# -- 5. draft tokens vs steps x top-k ------------------------------------------------------------


def test_the_quoted_rules_are_where_the_messages_say(pristine_tree):
    rules = server_settings.SPEC_TREE_RULES
    topk1 = source_lines(pristine_tree, rules["topk1"])
    assert "speculative_num_draft_tokens = self.speculative_num_steps + 1" in topk1
    assert "torch.topk(score_list, num_draft_token - 1" in source_lines(pristine_tree, rules["tree"])
    assert "trtllm_mha backend only supports topk = 1" in source_lines(pristine_tree, rules["trtllm_mha"])
    assert "Spec v2 currently only supports topk = 1" in source_lines(pristine_tree, rules["spec_v2"])


def scores_in_the_draft_tree(steps: int, topk: int) -> int:
    """What 0.5.9's draft loop (eagle_worker.py draft_forward, spec_utils.select_top_k_tokens) scores:
    top-k at step 0, then top-k x top-k at each later step. organize_draft_results takes tokens - 1 of them."""
    return topk + (steps - 1) * topk * topk


@pytest.mark.parametrize(
    "values, setting, rule",
    [
        ({"speculative_num_steps": 3, "speculative_eagle_topk": 1, "speculative_num_draft_tokens": 6},
         "speculative_num_draft_tokens", "server_args.py:2443-2450"),
        ({"speculative_num_steps": 1, "speculative_eagle_topk": 2, "speculative_num_draft_tokens": 4},
         "speculative_num_draft_tokens", "eagle_utils.py:27"),
        ({"speculative_eagle_topk": 4, "speculative_num_draft_tokens": 8, "attention_backend": "trtllm_mha"},
         "speculative_eagle_topk", "server_args.py:2433-2441"),
        ({"speculative_eagle_topk": 4, "speculative_num_draft_tokens": 8,
          "environment": {"SGLANG_ENABLE_SPEC_V2": "True"}}, "speculative_eagle_topk", "server_args.py:2376-2382"),
    ],
)  # fmt: skip
def test_sglang_refuses_or_changes_these_so_the_settings_refuse_them(values, setting, rule):
    with pytest.raises(server_settings.SettingsError) as err:
        server_settings.load(None, [f"{k}={_json(v)}" for k, v in values.items()], environ={})
    assert f"{setting}: " in str(err.value) and rule in str(err.value)


def _json(value) -> str:
    return value if isinstance(value, str) else json.dumps(value)


@GENERATED
@given(
    steps=st.integers(1, 8), topk=st.integers(1, 10), tokens=st.integers(2, 200),
    backend=st.sampled_from(["flashinfer", "fa3", "triton", "trtllm_mha", "trtllm_mla"]),
    spec_v2=st.sampled_from([None, "0", "false", "1", "True", "yes"]),
)  # fmt: skip
def test_generated_draft_trees(steps, topk, tokens, backend, spec_v2):
    environment = {} if spec_v2 is None else {"SGLANG_ENABLE_SPEC_V2": spec_v2}
    values = {"speculative_num_steps": steps, "speculative_eagle_topk": topk, "speculative_num_draft_tokens": tokens,
              "attention_backend": backend, "environment": environment}  # fmt: skip
    if topk == 1:
        refused = tokens != steps + 1  # server_args.py: adjusted to steps + 1, silently
    else:
        refused = (
            tokens - 1 > scores_in_the_draft_tree(steps, topk)
            or backend == "trtllm_mha"
            or (spec_v2 or "").lower() in ("1", "true", "yes")
        )
    if not refused:
        server_settings.ServerSettings(**values)
        return
    with pytest.raises(ValueError, match=r"speculative_(num_draft_tokens|eagle_topk): "):
        server_settings.ServerSettings(**values)


def test_a_draft_tree_sglang_would_change_is_bad_input_at_the_cli(run_cli):
    result = run_cli("serve", "--dry-run", "--set", "speculative_num_draft_tokens=6")
    assert result.returncode == 2, result.stderr
    assert "speculative_num_draft_tokens: with speculative_eagle_topk 1 it must be" in result.stderr
    assert "server_args.py:2443-2450" in result.stderr and "Traceback" not in result.stderr


# -- 2. no draft path ------------------------------------------------------------------------------

# 0.5.9's server_args.py:2398: the targets whose own checkpoint (MTP layers) is the draft when none is given.
SELF_DRAFTING = ["DeepseekV32ForCausalLM", "DeepseekV3ForCausalLM", "Glm4MoeForCausalLM",
                 "Glm4MoeLiteForCausalLM", "GlmMoeDsaForCausalLM", "BailingMoeForCausalLM",
                 "BailingMoeV2ForCausalLM", "BailingMoeV2_5ForCausalLM", "MistralLarge3ForCausalLM",
                 "PixtralForConditionalGeneration"]  # fmt: skip


def preflight_checks(tmp_path, tree, **overrides):
    s = server_settings.ServerSettings(port=free_port(), **overrides)
    report = preflight.run(s, str(tree), nvidia_smi=fake_nvidia_smi(tmp_path, "8x-rtx-pro-6000.csv"))
    return report, {f.name: f for f in report.findings}


def test_the_draft_path_fallback_is_where_the_message_says(pristine_tree):
    assert "model_path=model_path or server_args.model_path" in source_lines(
        pristine_tree, server_settings.DRAFT_PATH_FALLBACK
    )
    self_draft = eagle3_source.self_draft_targets(SourceIndex(sglang_source.locate(pristine_tree)))
    assert self_draft.architectures == SELF_DRAFTING
    assert (self_draft.location, self_draft.fallback) == ("srt/server_args.py:2398", "srt/configs/model_config.py:251")


@pytest.mark.parametrize("algorithm", ["EAGLE3", "EAGLE", "STANDALONE"])
def test_no_draft_path_is_bad_input(run_cli, algorithm):
    result = run_cli("serve", "--dry-run", "--set", f"speculative_algorithm={algorithm}",
                     "--set", "speculative_draft_model_path=null")  # fmt: skip
    assert result.returncode == 2, result.stdout + result.stderr
    assert f"speculative_draft_model_path: {algorithm} needs a draft model" in result.stderr
    assert "model_config.py:251" in result.stderr and "Traceback" not in result.stderr


def test_nextn_without_a_draft_path_fails_preflight_for_kimi(tmp_path, patched_tree, run_cli):
    target = kimi_target(tmp_path / "Kimi-K2.5")
    result = run_cli(
        "serve", "--dry-run", "--sglang", str(patched_tree), "--set", f"model_path={target}",
        "--set", "speculative_algorithm=NEXTN", "--set", "speculative_draft_model_path=null",
        "--set", f"port={free_port()}",
        env={"SGLANG_EAGLE3_NVIDIA_SMI": fake_nvidia_smi(tmp_path, "8x-rtx-pro-6000.csv")},
    )  # fmt: skip
    assert result.returncode == 1, result.stdout + result.stderr
    assert "[FAIL] draft model: speculative_draft_model_path is not set" in result.stdout
    assert "model_config.py:" in result.stdout and "(srt/server_args.py:" in result.stdout


@settings(max_examples=8, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])  # fmt: skip
@given(
    arch=st.sampled_from(
        [
            *SELF_DRAFTING,
            "KimiK25ForConditionalGeneration",
            "LlamaForCausalLM",
            "Qwen3MoeForCausalLM",
            "DeepseekV2ForCausalLM",
            "DeepseekV3ForCausalLMNextN",
        ]
    )
)
def test_generated_targets_without_a_draft_path(tmp_path, patched_tree, arch):
    with tempfile.TemporaryDirectory() as tmp:
        target = write_config(Path(tmp) / "target", {"architectures": [arch], "hidden_size": 64,
                                                     "num_hidden_layers": 4, "vocab_size": 256})  # fmt: skip
        _, checks = preflight_checks(tmp_path, patched_tree, model_path=str(target),
                                     speculative_algorithm="NEXTN", speculative_draft_model_path=None)  # fmt: skip
    draft = checks["draft model"]
    assert draft.status == ("ok" if arch in SELF_DRAFTING else "fail"), draft
    assert draft.where.startswith("srt/server_args.py:")  # the patched tree's lines are shifted


# -- 1. EAGLE with an EAGLE-3 draft, EAGLE3 with an EAGLE-1/2 draft ------------------------------------

# 0.5.9's EntryClass lists: srt/models/llama_eagle3.py (EAGLE3) and srt/models/*eagle.py (EAGLE 1/2).
EAGLE3_DRAFTS = ["LlamaForCausalLMEagle3"]
EAGLE_DRAFTS = ["LlamaForCausalLMEagle", "Qwen2ForCausalLMEagle", "MistralLarge3ForCausalLMEagle"]


def draft_report(tree, tmp, arch, algorithm, target_arch="KimiK25ForConditionalGeneration"):
    target = kimi_target(Path(tmp) / "target")
    draft = write_draft(Path(tmp) / "draft", eagle3_draft_config((1, 29, 57), architectures=[arch]), d2t_rows=32000)
    return draft_check.check(sglang_source.locate(tree), str(draft), str(target), algorithm, target_arch)


def test_eagle_with_an_eagle3_draft_and_the_reverse(tmp_path, pristine_tree):
    report = draft_report(pristine_tree, tmp_path / "a", "LlamaForCausalLMEagle3", "EAGLE", "DeepseekV3ForCausalLM")
    found = report.finding("algorithm")
    assert found.status == "fail" and found.where == "srt/models/llama_eagle3.py:186"
    assert found.message.startswith("speculative_algorithm is EAGLE, but LlamaForCausalLMEagle3 is an EAGLE3 draft")
    assert "only for EAGLE3 (srt/model_executor/model_runner.py:345)" in found.message
    assert "accept length about 1.0" in found.message and found.message.endswith("speculative_algorithm=EAGLE3")
    assert report.finding("architecture").status == "ok"  # the draft itself is fine: the setting is not
    gate = source_lines(pristine_tree, "srt/model_executor/model_runner.py:345")
    assert "is_eagle3() and not self.is_draft_worker" in gate

    report = draft_report(pristine_tree, tmp_path / "b", "LlamaForCausalLMEagle", "EAGLE3", "DeepseekV3ForCausalLM")
    found = report.finding("algorithm")
    assert found.status == "fail" and found.where == "srt/models/llama_eagle.py:113"
    assert "the first draft step fails" in found.message and found.message.endswith("speculative_algorithm=EAGLE")


def test_serve_stops_on_eagle_with_an_eagle3_draft(tmp_path, patched_tree, run_cli):
    target = kimi_target(tmp_path / "Kimi-K2.5")
    draft = write_draft(tmp_path / "draft", eagle3_draft_config((1, 29, 57)), d2t_rows=32000)
    result = run_cli(
        "serve", "--dry-run", "--sglang", str(patched_tree), "--set", f"model_path={target}",
        "--set", "speculative_algorithm=EAGLE", "--set", f"speculative_draft_model_path={draft}",
        "--set", f"port={free_port()}",
        env={"SGLANG_EAGLE3_NVIDIA_SMI": fake_nvidia_smi(tmp_path, "8x-rtx-pro-6000.csv")},
    )  # fmt: skip
    assert result.returncode == 1, result.stdout + result.stderr
    assert "[FAIL] draft algorithm: speculative_algorithm is EAGLE, but LlamaForCausalLMEagle3" in result.stdout


@settings(max_examples=16, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])  # fmt: skip
@given(
    algorithm=st.sampled_from(["EAGLE", "EAGLE3", "eagle3"]),
    arch=st.sampled_from([*EAGLE3_DRAFTS, *EAGLE_DRAFTS, "LlamaForCausalLM", "Eagle3DeepseekV2ForCausalLM", "MyDraft"]),
)
def test_generated_algorithm_and_draft_pairs(pristine_tree, algorithm, arch):
    with tempfile.TemporaryDirectory() as tmp:
        found = draft_report(pristine_tree, tmp, arch, algorithm).finding("algorithm")
    own = "EAGLE3" if arch in EAGLE3_DRAFTS else "EAGLE" if arch in EAGLE_DRAFTS else None
    if own is None:
        assert found.status == "not_checked"  # never OK for a draft nothing here knows
    elif own == algorithm.upper():
        assert found.status == "ok"
    else:
        assert found.status == "fail" and f"speculative_algorithm={own}" in found.message


# -- item 3: the draft's attention backend ----------------------------------------------------------


def test_the_backends_and_mla_architectures_are_read_from_the_source(pristine_tree):
    index = SourceIndex(sglang_source.locate(pristine_tree))
    table = attention_backends.backends(index)
    Serves = attention_backends.Serves
    assert {b: table[b][0] for b in ("trtllm_mla", "flashmla", "cutlass_mla", "trtllm_mha", "flashinfer", "fa3")} == {
        "trtllm_mla": Serves.MLA, "flashmla": Serves.MLA, "cutlass_mla": Serves.MLA,
        "trtllm_mha": Serves.MHA, "flashinfer": Serves.BOTH, "fa3": Serves.BOTH,
    }  # fmt: skip
    assert "def create_trtllm_mla_backend(runner):" in source_lines(pristine_tree, table["trtllm_mla"][1])
    names, where = attention_backends.mla_architectures(index)
    assert {"KimiK25ForConditionalGeneration", "DeepseekV3ForCausalLM"} <= names
    assert "LlamaForCausalLMEagle3" not in names and where.startswith("srt/configs/model_config.py:")
    assert "draft_attn_backend" in source_lines(pristine_tree, attention_backends.draft_override(index))


@pytest.mark.parametrize(
    "overrides, status, says",
    [
        ({"attention_backend": "trtllm_mla"}, "fail", "would run with trtllm_mla (inherited from attention_backend"),
        ({"attention_backend": "trtllm_mla", "speculative_draft_attention_backend": "flashinfer"}, "ok",
         "flashinfer (set by speculative_draft_attention_backend)"),
        ({"speculative_draft_attention_backend": "cutlass_mla"}, "fail", "would run with cutlass_mla (set by"),
        ({}, "ok", "flashinfer (inherited from attention_backend"),
        ({"attention_backend": "triton"}, "not_checked", "is not read from this SGLang's source"),
    ],
)  # fmt: skip
def test_the_draft_attention_backend_must_serve_a_llama_draft(tmp_path, pristine_tree, overrides, status, says):
    target = kimi_target(tmp_path / "Kimi-K2.5")
    draft = write_draft(tmp_path / "draft", eagle3_draft_config((1, 29, 57)), d2t_rows=32000)
    _, found = preflight_checks(
        tmp_path, pristine_tree, model_path=str(target), speculative_draft_model_path=str(draft), **overrides
    )
    finding = found["draft attention backend"]
    assert finding.status == status and says in finding.message, finding
    if status == "fail":
        assert "Set speculative_draft_attention_backend to one that serves it (flashinfer" in finding.message
        assert finding.where.startswith("srt/layers/attention/attention_registry.py:")


# -- item 6: the draft's quantization ---------------------------------------------------------------


def test_the_draft_quantization_rule_is_where_the_finding_says(pristine_tree):
    where = eagle3_source.draft_quantization_inheritance(SourceIndex(sglang_source.locate(pristine_tree)))
    lines = source_lines(pristine_tree, f"{where}-{int(where.rsplit(':', 1)[1]) + 1}")
    assert "if self.speculative_draft_model_quantization is None:" in lines
    assert "self.speculative_draft_model_quantization = self.quantization" in lines


@pytest.mark.parametrize(
    "extra_args, draft_quant, status, says",
    [
        (["--quantization", "modelopt_fp4"], None, "fail",
         "the draft {draft} is not quantized, so it fails when it loads, after the target. Add "
         "--speculative-draft-model-quantization unquant to extra_args"),
        (["--quantization=modelopt_fp4"], "fp8", "fail", "is fp8, so it fails"),
        (["--quantization", "modelopt_fp4", "--speculative-draft-model-quantization", "unquant"], None, "ok",
         "comes from --speculative-draft-model-quantization unquant"),
        (["--quantization", "modelopt_fp4"], "modelopt_fp4", "ok", "inherits --quantization modelopt_fp4"),
        ([], None, "ok", "comes from its own config.json"),
    ],
)  # fmt: skip
def test_an_explicit_target_quantization_reaches_the_draft(
    tmp_path, pristine_tree, extra_args, draft_quant, status, says
):
    """--quantization modelopt_fp4 (an NVFP4 target) is given to the draft too unless
    --speculative-draft-model-quantization says otherwise: a bf16 draft then fails to load."""
    target = kimi_target(tmp_path / "Kimi-K2.5")
    config = eagle3_draft_config((1, 29, 57))
    if draft_quant:
        config["quantization_config"] = {"quant_method": draft_quant}
    draft = write_draft(tmp_path / "draft", config, d2t_rows=32000)
    _, found = preflight_checks(
        tmp_path, pristine_tree, model_path=str(target), speculative_draft_model_path=str(draft), extra_args=extra_args
    )
    finding = found["draft quantization"]
    assert finding.status == status and says.format(draft=draft) in finding.message, finding
    assert finding.where.startswith("srt/server_args.py:")


# -- item 4: settings the draft inherits: the target's revision --------------------------------------


def test_the_revision_rule_is_where_the_finding_says(pristine_tree):
    where = eagle3_source.draft_revision_inheritance(SourceIndex(sglang_source.locate(pristine_tree)))
    assert "revision=model_revision or server_args.revision" in source_lines(pristine_tree, where)


TARGET_COMMIT = "a" * 40
DRAFT_COMMIT = "b" * 40


@pytest.mark.parametrize(
    "overrides, status",
    [
        ({"revision": TARGET_COMMIT}, "fail"),
        ({"revision": TARGET_COMMIT, "speculative_draft_model_revision": DRAFT_COMMIT}, "ok"),
        ({}, None),  # no target revision: nothing to inherit
    ],
)
def test_a_pinned_target_revision_reaches_a_draft_hub_id(tmp_path, pristine_tree, overrides, status):
    """SGLang passes `model_revision or server_args.revision` to the draft's ModelConfig: a draft hub id
    without its own revision is asked for the target's commit, which its repository does not have."""
    _, found = preflight_checks(
        tmp_path, pristine_tree, speculative_draft_model_path="AQ-MedAI/Kimi-K25-eagle3", **overrides
    )
    finding = found.get("draft revision")
    assert (finding.status if finding else None) == status, finding
    if status == "fail":
        assert (
            f"revision {TARGET_COMMIT} (the target's) is given to the draft AQ-MedAI/Kimi-K25-eagle3" in finding.message
        )
        assert "Set speculative_draft_model_revision" in finding.message
        assert finding.where.startswith("srt/configs/model_config.py:")


def test_a_local_draft_takes_no_revision(tmp_path, pristine_tree):
    draft = write_draft(tmp_path / "draft", eagle3_draft_config((1, 29, 57)), d2t_rows=32000)
    _, found = preflight_checks(
        tmp_path, pristine_tree, revision=TARGET_COMMIT, speculative_draft_model_path=str(draft)
    )
    assert "draft revision" not in found
