"""The speculative-decoding misconfigurations users hit (issue 19), each caught before any weights load.

Each rule is read in SGLang 0.5.9's real source (the unpacked wheel) at the file:line the message quotes;
the expected outcomes of generated cases are derived here from what that source does, not from the code
under test.
"""

from __future__ import annotations

import fnmatch
import json
import re
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sglang_eagle3.judging import draft_check, draft_settings, preflight, sglang_validation
from sglang_eagle3.serving import settings as server_settings
from sglang_eagle3.source import attention_backends, draft_inheritance, eagle3_source, sglang_source
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
        # The backend's and SGLANG_ENABLE_SPEC_V2's top-k rules are preflight's, per tree (test_sglang_rules.py)
        refused = tokens - 1 > scores_in_the_draft_tree(steps, topk)
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
    report = preflight.preflight(s, str(tree), nvidia_smi=fake_nvidia_smi(tmp_path, "8x-rtx-pro-6000.csv"))
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
def test_generated_targets_without_a_draft_path(tmp_path, patched_tree, arch, monkeypatch):
    # The draft-model finding is what this judges; SGLang's own run (test_sglang_rules.py's) takes seconds an example.
    monkeypatch.setattr(sglang_validation, "check", lambda *args, **kwargs: None)
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


# -- item 4: settings the draft inherits: context length, --model-impl, --load-format -----------------


def pristine_index(tree) -> SourceIndex:
    return SourceIndex(sglang_source.locate(tree))


def test_the_inherited_settings_rules_are_where_the_findings_say(pristine_tree):
    index = pristine_index(pristine_tree)
    context = draft_inheritance.context_rule(index)
    assert draft_inheritance.TARGET_CONTEXT in source_lines(pristine_tree, context.override)
    assert context.override == "srt/speculative/eagle_worker.py:107"
    assert "raise ValueError(" in source_lines(pristine_tree, context.refuse)
    assert context.refuse == "srt/configs/model_config.py:382"
    assert "context_length > derived_context_len" in source_lines(pristine_tree, "srt/configs/model_config.py:364")
    assert context.allow_env == ["SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN"]
    assert context.true_values == ["true", "1", "yes", "y"]  # srt/environ.py's EnvBool.parse
    assert "def get_context_length(config):" in source_lines(pristine_tree, context.derive)
    impl = draft_inheritance.model_impl_rule(index)
    assert "model_impl=server_args.model_impl" in source_lines(pristine_tree, impl.inherit)
    assert set(impl.replaced) == {"transformers", "mindspore"} and set(impl.values) >= {"auto", "sglang"}
    for value, where in impl.replaced.items():
        assert f"ModelImpl.{value.upper()}" in source_lines(pristine_tree, where)
    load = draft_inheritance.load_format_rule(index)
    assert "speculative_draft_load_format is not None" in source_lines(pristine_tree, load.override)
    for fmt, (_, where) in load.patterns.items():  # an `elif (` test may span the next lines
        assert f"LoadFormat.{fmt.upper()}" in source_lines(pristine_tree, f"{where}-{int(where.split(':')[1]) + 3}")
    assert {f: p for f, (p, _) in load.patterns.items()} == LOAD_PATTERNS and load.fallback == ["*.pt"]


# srt/model_loader/loader.py:396-411 (DefaultModelLoader._prepare_weights), and :419-420 adds *.pt.
LOAD_PATTERNS = {"auto": ["*.safetensors", "*.bin"], "safetensors": ["*.safetensors"],
                 "fastsafetensors": ["*.safetensors"], "mistral": ["consolidated*.safetensors"], "pt": ["*.pt"],
                 "npcache": ["*.bin"]}  # fmt: skip


def kimi_with_length(directory: Path, length: int | None, factor: float | None = None) -> Path:
    """Kimi-K2.5's text config with a max_position_embeddings (262144 in the real one) and rope scaling."""
    target = kimi_target(directory)
    config = json.loads((target / "config.json").read_text())
    if length is not None:
        config["text_config"]["max_position_embeddings"] = length
    if factor is not None:
        config["text_config"]["rope_scaling"] = {"rope_type": "yarn", "factor": factor}
    return write_config(target, config)


def context_of(length: int, factor: float | None) -> int:
    """What get_context_length (hf_transformers_utils.py:453) makes of max_position_embeddings and a rope
    factor without original_max_position_embeddings and not llama3: their product."""
    return int(length * (factor or 1))


@pytest.mark.parametrize(
    "settings_values, setting",
    [
        ({}, "context_length"),
        ({"extra_args": ["--model-impl", "transformers"]}, "--model-impl"),
        ({"extra_args": ["--load-format", "pt"]}, "--speculative-draft-load-format"),
    ],
)
def test_a_shared_setting_that_breaks_the_draft_fails_preflight(tmp_path, patched_tree, run_cli, settings_values,
                                                                  setting):  # fmt: skip
    target = kimi_with_length(tmp_path / "Kimi-K2.5", 262144)
    length = 2048 if setting == "context_length" else 262144
    draft = write_draft(tmp_path / "draft", eagle3_draft_config((1, 29, 57), max_position_embeddings=length),
                        d2t_rows=32000)  # fmt: skip
    sets = [f"{k}={json.dumps(v)}" for k, v in settings_values.items()]
    result = run_cli(
        "serve", "--dry-run", "--sglang", str(patched_tree), "--set", f"model_path={target}",
        "--set", f"speculative_draft_model_path={draft}", "--set", f"port={free_port()}",
        *[a for s in sets for a in ("--set", s)],
        env={"SGLANG_EAGLE3_NVIDIA_SMI": fake_nvidia_smi(tmp_path, "8x-rtx-pro-6000.csv"),
             "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN": ""},
    )  # fmt: skip
    assert result.returncode == 1, result.stdout + result.stderr
    failed = [line for line in result.stdout.splitlines() if line.startswith("[FAIL]")]
    assert len(failed) == 1 and setting in failed[0] and "after the target" in failed[0], result.stdout
    assert "Traceback" not in result.stderr


def inherited(tree, tmp, check, *args, **values):
    s = server_settings.ServerSettings(**values)
    report = preflight.Preflight()
    getattr(draft_settings, check)(report, s, pristine_index(tree), *args)
    return report.findings[0] if report.findings else None


@GENERATED
@given(
    target=st.sampled_from([None, 2048, 4096, 32768, 131072, 262144]),
    factor=st.sampled_from([None, 1.0, 4.0]),
    draft=st.sampled_from([None, 2048, 8192, 131072, 262144]),
    context_length=st.sampled_from([None, 1024, 2048, 8192, 262144]),
    allow=st.sampled_from([None, "1", "true", "Y", "0", "no", "maybe"]),
)
def test_generated_context_lengths(pristine_tree, target, factor, draft, context_length, allow):
    with tempfile.TemporaryDirectory() as tmp:
        target_dir = kimi_with_length(Path(tmp) / "target", target, factor)
        draft_dir = write_draft(Path(tmp) / "draft", eagle3_draft_config((1, 29, 57), max_position_embeddings=draft
                                                                          if draft else ...))  # fmt: skip
        env = {} if allow is None else {"SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN": allow}
        found = inherited(pristine_tree, tmp, "check_draft_context", draft_dir, str(target_dir),
                          context_length=context_length, environment=env)  # fmt: skip
    given_length = context_length or (context_of(target, factor) if target else None)
    if draft is None or given_length is None:
        assert found.status == "not_checked", found
    elif given_length <= draft:
        assert found.status == "ok" and f"context length {given_length}" in found.message, found
    elif (allow or "").lower() in ("true", "1", "yes", "y"):
        assert found.status == "warn" and f"Set context_length to {draft}" in found.message, found
    else:
        assert found.status == "fail" and f"Set context_length to at most {draft}" in found.message, found
    assert found.where == "srt/configs/model_config.py:382"


@GENERATED
@given(
    impl=st.sampled_from([None, "auto", "sglang", "transformers", "mindspore", "Transformers", "vllm"]),
    spelling=st.sampled_from(["space", "equals"]),
)
def test_generated_model_implementations(pristine_tree, impl, spelling):
    args = [] if impl is None else [f"--model-impl={impl}"] if spelling == "equals" else ["--model-impl", impl]
    found = inherited(pristine_tree, None, "check_draft_model_impl", "LlamaForCausalLMEagle3", extra_args=args)
    # model_loader/utils.py:113-115: TRANSFORMERS and MINDSPORE build another class; AUTO builds a natively
    # supported architecture (the draft's) from its own class; values outside ModelImpl are not known here.
    expected = {None: None, "auto": "ok", "sglang": "ok", "transformers": "fail", "mindspore": "fail"}
    assert (found.status if found else None) == expected.get(impl, "not_checked"), found
    if found and found.status == "fail":
        assert "Remove --model-impl from extra_args" in found.message


@GENERATED
@given(
    target=st.sampled_from([None, "auto", "pt", "safetensors", "npcache", "mistral", "gguf", "sharded_state"]),
    draft=st.sampled_from([None, "auto", "pt", "safetensors", "dummy"]),
    files=st.sets(st.sampled_from(["model.safetensors", "pytorch_model.bin", "consolidated.safetensors", "w.pt"]),
                  min_size=1),
)  # fmt: skip
def test_generated_load_formats(pristine_tree, target, draft, files):
    args = [*(["--load-format", target] if target else []), *(["--speculative-draft-load-format", draft] if draft
                                                               else [])]  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        directory = write_config(Path(tmp) / "draft", eagle3_draft_config())
        for name in files:
            (directory / name).write_bytes(b"")
        found = inherited(pristine_tree, tmp, "check_draft_load_format", directory, extra_args=args)
    used = draft or target
    if used is None:
        assert found is None
    elif used not in LOAD_PATTERNS:
        assert found.status == "not_checked", found
    else:
        matches = any(fnmatch.fnmatch(name, p) for name in files for p in [*LOAD_PATTERNS[used], "*.pt"])
        assert found.status == ("ok" if matches else "fail"), found
        if not matches:
            assert "Add --speculative-draft-load-format " in found.message


@GENERATED
@given(
    revision=st.sampled_from([None, TARGET_COMMIT, "main", "v1.0"]),
    draft_revision=st.sampled_from([None, DRAFT_COMMIT, "main"]),
    draft=st.sampled_from(["AQ-MedAI/Kimi-K25-eagle3", "lightseekorg/kimi-k2.5-eagle3", "./local-draft"]),
)
def test_generated_revisions(pristine_tree, revision, draft_revision, draft):
    found = inherited(pristine_tree, None, "check_draft_revision", revision=revision,
                      speculative_draft_model_revision=draft_revision, speculative_draft_model_path=draft)  # fmt: skip
    # model_config.py:253: model_revision or server_args.revision; a local directory takes no revision.
    if revision is None or draft.startswith("./"):
        assert found is None
    else:
        assert found.status == ("ok" if draft_revision else "fail"), found
        if draft_revision is None:
            assert f"revision {revision} (the target's) is given to the draft {draft}" in found.message


# -- items 3 and 6, generated -------------------------------------------------------------------------


def registry_oracle(tree) -> dict[str, str]:
    """What each backend in attention_registry.py serves, read here from its text: 'mla' when its factory
    raises for non-MLA models or builds only *MLA* classes, 'mha' when it raises for MLA models, 'both' when it
    branches on use_mla_backend without raising, else None."""
    text = (tree / "sglang/srt/layers/attention/attention_registry.py").read_text()
    serves = {}
    for block in text.split("@register_attention_backend(")[1:]:
        name, body = block.split('"')[1], block
        classes = re.findall(r"return (\w+)\(", body)
        if "can only be used with MLA models" in body:
            serves[name] = "mla"
        elif "can only be used with non-MLA models" in body:
            serves[name] = "mha"
        elif "use_mla_backend" in body and "raise" not in body:
            serves[name] = "both"
        elif classes and all("MLA" in c for c in classes):
            serves[name] = "mla"
        else:
            serves[name] = None
    return serves


MLA_DRAFTS = ["DeepseekV3ForCausalLM", "KimiK25ForConditionalGeneration"]  # MLA by model_config.py's branches
MHA_DRAFTS = ["LlamaForCausalLMEagle3", "LlamaForCausalLMEagle", "Qwen2ForCausalLMEagle"]


@GENERATED
@given(
    backend=st.sampled_from(["flashinfer", "fa3", "triton", "torch_native", "trtllm_mla", "trtllm_mha",
                             "flashmla", "cutlass_mla", "fa4", "aiter"]),
    via_draft_setting=st.booleans(),
    arch=st.sampled_from([*MLA_DRAFTS, *MHA_DRAFTS]),
)  # fmt: skip
def test_generated_backend_and_draft_architecture_pairs(pristine_tree, backend, via_draft_setting, arch):
    values = {"speculative_draft_attention_backend": backend} if via_draft_setting else {"attention_backend": backend}
    found = inherited(pristine_tree, None, "check_draft_attention", arch, **values)
    serves = registry_oracle(pristine_tree)[backend]
    kind = "mla" if arch in MLA_DRAFTS else "mha"
    if serves is None:
        assert found.status == "not_checked", found
    elif serves in ("both", kind):
        assert found.status == "ok", found
    else:
        assert found.status == "fail" and "Set speculative_draft_attention_backend" in found.message, found
        fits = found.message.rsplit("(", 1)[1].rstrip(")").split(", ")
        assert all(registry_oracle(pristine_tree)[b] in ("both", kind) for b in fits), found


QUANT_METHODS = [None, "modelopt_fp4", "modelopt_fp8", "fp8", "awq", "compressed-tensors"]


@GENERATED
@given(
    target=st.sampled_from(QUANT_METHODS),
    draft=st.sampled_from(QUANT_METHODS),
    override=st.sampled_from([None, "unquant", "fp8", "modelopt_fp4"]),
)
def test_generated_quantization_pairs(pristine_tree, target, draft, override):
    args = [*(["--quantization", target] if target else []),
            *(["--speculative-draft-model-quantization", override] if override else [])]  # fmt: skip
    config = eagle3_draft_config((1, 29, 57), quantization_config={"quant_method": draft} if draft else ...)
    with tempfile.TemporaryDirectory() as tmp:
        directory = write_config(Path(tmp) / "draft", config)
        found = inherited(pristine_tree, tmp, "check_draft_quantization", directory, extra_args=args)
    # server_args.py:882-883: the draft gets --quantization unless --speculative-draft-model-quantization is set.
    reaches = target if override is None else None
    assert found.status == ("fail" if reaches and reaches != draft else "ok"), found
    if found.status == "fail":
        assert f"--speculative-draft-model-quantization {draft or 'unquant'}" in found.message


# -- item 4: --json-model-override-args reaches the draft's config ------------------------------------


def test_the_override_rule_is_where_the_finding_says(pristine_tree):
    rule = draft_inheritance.override_rule(pristine_index(pristine_tree))
    assert "model_override_args=server_args.json_model_override_args" in source_lines(pristine_tree, rule.inherit)
    assert "self.model_override_args = json.loads(model_override_args)" in source_lines(pristine_tree, rule.parse)
    applied = source_lines(pristine_tree, f"{rule.apply}-{int(rule.apply.split(':')[1]) + 1}")
    assert "if model_override_args:" in applied and "config.update(model_override_args)" in applied
    assert "server_args.json_model_override_args = (" in source_lines(pristine_tree, rule.replaced)
    assert (rule.inherit, rule.parse, rule.apply) == (
        "srt/configs/model_config.py:255", "srt/configs/model_config.py:123", "srt/utils/hf_transformers_utils.py:392"
    )  # fmt: skip


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 10**6) | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=6,
)
DRAFT_KEYS = ["architectures", "hidden_size", "num_hidden_layers", "max_position_embeddings", "eagle_config",
              "vocab_size", "n_routed_experts", "kv_lora_rank"]  # fmt: skip


@GENERATED
@given(override=st.dictionaries(st.sampled_from(DRAFT_KEYS), JSON_VALUES, max_size=4))
def test_the_override_is_applied_as_transformers_applies_it(pristine_tree, override):
    """SGLang's own statements (json.loads, then config.update) run on a stand-in config: what they make of the
    draft's config.json equals what the real transformers LlamaConfig (the version SGLang 0.5.9 pins) holds."""
    from importlib.metadata import version

    from transformers import LlamaConfig

    pinned = next((pristine_tree / "sglang-0.5.9.dist-info").glob("METADATA")).read_text()
    assert f"Requires-Dist: transformers=={version('transformers')}" in pinned  # the oracle is the one SGLang runs
    rule = draft_inheritance.override_rule(pristine_index(pristine_tree))
    config = eagle3_draft_config((1, 29, 57))
    parsed = rule.parsed(json.dumps(override))
    applied = rule.applied(config, parsed)
    real = LlamaConfig.from_dict(config)
    if parsed:  # get_config: `if model_override_args: config.update(model_override_args)`
        real.update(parsed)
    assert {key: getattr(real, key) for key in applied} == applied


@pytest.mark.parametrize(
    "override, says",
    [
        ({"num_hidden_layers": 61}, "draft layers: the draft has 61 layers"),
        ({"architectures": ["DeepseekV3ForCausalLM"]}, "draft architecture: DeepseekV3ForCausalLM is a model class"),
        ({"hidden_size": 4096}, "draft hidden size: the draft expects target hidden states of width 4096"),
        ({"max_position_embeddings": 2048}, "draft context length: the draft gets the target's context length 262144"),
        ({"vocab_size": 32000}, "draft vocabulary: vocab_size 32000 differs from the target's 163840"),
        ("{'num_hidden_layers': 61}", "is not JSON (Expecting property name enclosed in double quotes at column 2)"),
    ],
)  # fmt: skip
def test_an_override_that_breaks_the_draft_fails_preflight(tmp_path, patched_tree, run_cli, override, says):
    """Kimi-K2.5's config nests its text model: an override of top-level fields (meant for the target) leaves
    the target's text model as it is, and reaches the Llama-architecture draft's own fields."""
    target = kimi_with_length(tmp_path / "Kimi-K2.5", 262144)
    draft = write_draft(tmp_path / "draft", eagle3_draft_config((1, 29, 57), max_position_embeddings=262144),
                        d2t_rows=32000)  # fmt: skip
    value = override if isinstance(override, str) else json.dumps(override)
    result = run_cli(
        "serve", "--dry-run", "--sglang", str(patched_tree), "--set", f"model_path={target}",
        "--set", f"speculative_draft_model_path={draft}", "--set", f"port={free_port()}",
        "--set", f"extra_args={json.dumps(['--json-model-override-args', value])}",
        env={"SGLANG_EAGLE3_NVIDIA_SMI": fake_nvidia_smi(tmp_path, "8x-rtx-pro-6000.csv"),
             "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN": ""},
    )  # fmt: skip
    assert result.returncode == 1, result.stdout + result.stderr
    failed = [line for line in result.stdout.splitlines() if line.startswith("[FAIL]")]
    assert len(failed) == 1 and failed[0].startswith("[FAIL] draft model override: "), result.stdout
    assert "--json-model-override-args" in failed[0] and says in failed[0], failed[0]
    assert "Traceback" not in result.stderr and value not in failed[0]  # the finding does not repeat the value


@pytest.mark.parametrize(
    "value, status",
    [
        ('{"rope_theta": 50000}', "ok"),  # a field the draft has, to a value it takes
        ('{"n_routed_experts": 384, "kv_lora_rank": 512}', "ok"),  # the target's keys: the Llama draft reads neither
        ("{}", "ok"), ("null", "ok"),  # empty: get_config applies nothing
        ("[1, 2]", "not_checked"), ('"layers"', "not_checked"),  # parsed, but no object of config fields
        ('{"text_config": {"hidden_size": 7168}}', "not_checked"),
    ],
)  # fmt: skip
def test_overrides_the_draft_takes_or_that_are_not_checked(tmp_path, pristine_tree, value, status):
    target = kimi_with_length(tmp_path / "Kimi-K2.5", 262144)
    draft = write_draft(tmp_path / "draft", eagle3_draft_config((1, 29, 57), max_position_embeddings=262144),
                        d2t_rows=32000)  # fmt: skip
    _, found = preflight_checks(tmp_path, pristine_tree, model_path=str(target), speculative_draft_model_path=str(
        draft), extra_args=["--json-model-override-args", value])  # fmt: skip
    finding = found["draft model override"]
    assert finding.status == status and finding.where == "srt/utils/hf_transformers_utils.py:392", finding


def draft_with_override(tree, tmp, override: dict, context_length=None):
    target = kimi_with_length(Path(tmp) / "target", 262144)
    draft = write_draft(Path(tmp) / "draft", eagle3_draft_config((1, 29, 57), max_position_embeddings=262144),
                        d2t_rows=32000)  # fmt: skip
    s = server_settings.ServerSettings(
        model_path=str(target), speculative_draft_model_path=str(draft), context_length=context_length,
        extra_args=["--json-model-override-args", json.dumps(override)],
    )  # fmt: skip
    report = preflight.Preflight()
    draft_settings.check_draft(report, s, sglang_source.locate(tree))
    return {f.name: f for f in report.findings}


# Each example runs the whole draft check on two written configs (about 2 s): few, but derandomized.
@settings(max_examples=12, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])  # fmt: skip
@given(
    layers=st.sampled_from([..., 1, 2, 61]),
    hidden=st.sampled_from([..., 7168, 7167, 4096]),
    length=st.sampled_from([..., 131071, 131072, 262144]),
    arch=st.sampled_from([..., "LlamaForCausalLMEagle3", "LlamaForCausalLMEagle", "DeepseekV3ForCausalLM"]),
    target_key=st.sampled_from([..., "n_routed_experts", "qk_rope_head_dim"]),
    context_length=st.sampled_from([None, 131072]),
)
def test_generated_overrides(pristine_tree, layers, hidden, length, arch, target_key, context_length):
    values = {"num_hidden_layers": layers, "hidden_size": hidden, "max_position_embeddings": length,
              "architectures": [arch] if arch is not ... else ..., target_key: 64}  # fmt: skip
    override = {k: v for k, v in values.items() if v is not ... and k is not ...}
    with tempfile.TemporaryDirectory() as tmp:
        found = draft_with_override(pristine_tree, tmp, override, context_length)
    finding = found["draft model override"]
    # What the draft (hidden 7168, 1 layer, length 262144, LlamaForCausalLMEagle3, for EAGLE3) takes, by the rules
    # the draft checks read: llama_eagle3.py:198 (1 layer), the target's hidden size 7168, the EAGLE3 EntryClass,
    # a length of its own at least the target's (context_length, else the target's 262144: eagle_worker.py:107).
    # The target's keys are ones the Llama draft never reads.
    breaks = (
        override.get("num_hidden_layers", 1) != 1
        or override.get("hidden_size", 7168) != 7168
        or override.get("architectures", ["LlamaForCausalLMEagle3"]) != ["LlamaForCausalLMEagle3"]
        or (context_length or 262144) > override.get("max_position_embeddings", 262144)
    )
    if not override:
        assert finding.status == "ok" and "is empty" in finding.message
    elif breaks:
        assert finding.status == "fail" and "--json-model-override-args" in finding.message, finding
    else:
        assert finding.status == "ok", finding


# -- item 4, the other way round: the draft's runner turns the target's chunked prefix cache off (#22780) --------


def test_the_chunked_prefix_rule_is_where_the_findings_say(pristine_tree):
    rule = draft_inheritance.chunked_prefix_rule(pristine_index(pristine_tree))
    assert rule.turn_off == "srt/model_executor/model_runner.py:685"
    turn_off = source_lines(pristine_tree, "srt/model_executor/model_runner.py:685-690")
    assert "not self.use_mla_backend" in turn_off and "server_args.disable_chunked_prefix_cache = True" in turn_off
    listed = re.search(r"CHUNKED_PREFIX_CACHE_SUPPORTED_ATTENTION_BACKENDS = \[(.*?)\]", (
        pristine_tree / "sglang/srt/model_executor/model_runner.py").read_text(), re.DOTALL).group(1)  # fmt: skip
    assert rule.supported == re.findall(r'"(\w+)"', listed)
    assert source_lines(pristine_tree, rule.every_runner).strip() == "self.model_specific_adjustment()"
    first, second = int(rule.draft_after_target.split(":")[1]) - 1, rule.draft_after_target
    assert source_lines(pristine_tree, f"srt/managers/scheduler.py:{first}").strip() == "self.init_tp_model_worker()"
    assert source_lines(pristine_tree, second).strip() == "self.maybe_init_draft_worker()"
    kept = source_lines(pristine_tree, f"{rule.model_keeps}-{int(rule.model_keeps.split(':')[1]) + 2}")
    assert "self.disable_chunked_prefix_cache = (" in kept and "get_global_server_args()" in kept
    assert rule.reads["fa3"] == rule.reads["fa4"] == [("srt/layers/attention/flashattention_backend.py:943", True)]
    assert "assert not get_global_server_args().disable_chunked_prefix_cache" in source_lines(
        pristine_tree, "srt/layers/attention/flashattention_backend.py:943"
    )
    assert rule.reads["flashinfer"] == [("srt/layers/attention/flashinfer_mla_backend.py:210", False)]
    built = source_lines(pristine_tree, "srt/layers/attention/flashinfer_mla_backend.py:194-210")
    assert built.lstrip().startswith("def __init__(") and "not get_global_server_args().disable_chunked" in built


def asserts_per_prefill(tree) -> set[str]:
    """The backends whose factory (attention_registry.py, read here as text) imports its class from a module that
    asserts the flag is off outside ``__init__``: on each forward, after the draft's runner has changed it."""
    registry = (tree / "sglang/srt/layers/attention/attention_registry.py").read_text()
    found = set()
    for block in registry.split("@register_attention_backend(")[1:]:
        name = block.split('"')[1]
        for module in re.findall(r"from sglang\.srt\.layers\.attention\.(\w+) import", block):
            text = (tree / f"sglang/srt/layers/attention/{module}.py").read_text()
            for method in re.split(r"\n    def ", text)[1:]:
                if (
                    not method.startswith("__init__")
                    and "assert not get_global_server_args().disable_chunked" in method
                ):
                    found.add(name)
    return found


def test_the_oracle_finds_the_flashattention_backends(pristine_tree):
    assert {"fa3", "fa4"} <= asserts_per_prefill(pristine_tree) and "flashinfer" not in asserts_per_prefill(
        pristine_tree)  # fmt: skip


@pytest.mark.parametrize(
    "overrides, status, says",
    [
        ({}, "ok", "flashinfer reads the flag only when it is built (srt/layers/attention/flashinfer_mla_backend.py"),
        ({"attention_backend": "fa3"}, "warn", "fa3 reads it again on each prefill (srt/layers/attention/"
         "flashattention_backend.py:943: asserts it is off)"),
        ({"attention_backend": "fa4", "speculative_draft_attention_backend": "flashinfer"}, "warn",
         "Add --disable-chunked-prefix-cache to extra_args, or set attention_backend flashinfer"),
        ({"attention_backend": "fa3", "extra_args": ["--disable-chunked-prefix-cache"]}, "ok",
         "extra_args sets --disable-chunked-prefix-cache"),
        ({"attention_backend": "triton"}, "ok", "attention_backend triton is not one of flashinfer, fa3"),
        ({"attention_backend": "fa3", "extra_args": ["--prefill-attention-backend", "flashinfer"]}, "not_checked",
         "with --prefill-attention-backend in extra_args"),
    ],
)  # fmt: skip
def test_the_draft_turns_the_targets_chunked_prefix_cache_off(tmp_path, pristine_tree, overrides, status, says):
    """Kimi-K2.5 (MLA) with a Llama-architecture draft: the draft's runner turns the flag on after the target
    was built; FlashAttention (fa3, fa4) asserts it is off on the target's next long-prompt prefill."""
    target = kimi_target(tmp_path / "Kimi-K2.5")
    draft = write_draft(tmp_path / "draft", eagle3_draft_config((1, 29, 57)), d2t_rows=32000)
    _, found = preflight_checks(
        tmp_path, pristine_tree, model_path=str(target), speculative_draft_model_path=str(draft), **overrides
    )
    finding = found["draft chunked prefix cache"]
    assert finding.status == status and says in finding.message, finding
    assert finding.where.startswith(("srt/model_executor/model_runner.py:", "srt/layers/attention/"))


MHA_TARGETS = ["LlamaForCausalLM", "Qwen3MoeForCausalLM"]


@settings(GENERATED, max_examples=20)  # about 2 s an example: each reads the backends' classes afresh
@given(
    backend=st.sampled_from(["flashinfer", "fa3", "fa4", "flashmla", "cutlass_mla", "trtllm_mla", "triton",
                             "torch_native", "trtllm_mha", "intel_xpu"]),
    target=st.sampled_from([*MLA_DRAFTS, *MHA_TARGETS]),
    draft=st.sampled_from([*MHA_DRAFTS, *MLA_DRAFTS]),
    disable=st.booleans(),
    split=st.sampled_from([None, "--prefill-attention-backend", "--decode-attention-backend"]),
)  # fmt: skip
def test_generated_chunked_prefix_cases(pristine_tree, backend, target, draft, disable, split):
    args = [*(["--disable-chunked-prefix-cache"] if disable else []), *([split, "flashinfer"] if split else [])]
    found = inherited(pristine_tree, None, "check_draft_chunked_prefix", draft, target, attention_backend=backend,
                      extra_args=args)  # fmt: skip
    # model_runner.py:685-690: a runner turns the flag on for a non-MLA model or a backend outside the list; the
    # target's own runner already did unless it is MLA on a listed backend. Only then does the draft's change it.
    listed = backend in ["flashinfer", "fa3", "fa4", "flashmla", "cutlass_mla", "trtllm_mla"]
    changes = not disable and target in MLA_DRAFTS and draft not in MLA_DRAFTS and listed
    if not changes:
        assert found.status == "ok", found
    elif split:
        assert found.status == "not_checked", found
    elif backend in asserts_per_prefill(pristine_tree):
        assert found.status == "warn" and "--disable-chunked-prefix-cache" in found.message, found
    else:
        assert found.status == "ok" and "only when it is built" in found.message, found
