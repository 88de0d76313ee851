"""Draft checks (`probe --draft`, serve's preflight) on the pristine and patched SGLang 0.5.9 source.

Targets and drafts are tiny directories (draft_fixtures): real config.json shapes, real
safetensors files. What SGLang will do with them is read from the real 0.5.9 source.
"""

from __future__ import annotations

import ast
import json
import re
import shutil

import pytest
from sglang_eagle3.judging import draft_check, preflight
from sglang_eagle3.serving import settings
from sglang_eagle3.source import sglang_source
from support.bench_fixtures import free_port
from support.draft_fixtures import (
    KIMI_HIDDEN,
    KIMI_VOCAB,
    eagle3_draft_config,
    hub_cache_snapshot,
    kimi_target,
    write_config,
    write_draft,
)
from support.gpus import fake_nvidia_smi
from support.own_resources import missing_path

KIMI = "KimiK25ForConditionalGeneration"
DEEPSEEK = "DeepseekV3ForCausalLM"  # the pristine KimiK25 wrapper lacks the method; its inner model has it


def verdicts(report: draft_check.DraftReport) -> dict[str, str]:
    return {f.name: f.status for f in report.findings}


def run(tree, draft, target, arch=None):
    return draft_check.check(sglang_source.locate(tree), str(draft), str(target), target_arch=arch)


@pytest.fixture
def target(tmp_path):
    return kimi_target(tmp_path / "Kimi-K2.5")


# -- a good pair, and the two conventions ---------------------------------------------------


def test_output_convention_draft_is_ready_on_both_trees(tmp_path, target, patched_tree, pristine_tree):
    draft = write_draft(tmp_path / "draft", eagle3_draft_config((1, 29, 57)), d2t_rows=32000)
    for tree, arch in ((patched_tree, KIMI), (pristine_tree, DEEPSEEK)):
        report = run(tree, draft, target, arch)
        assert set(verdicts(report).values()) == {"ok"}, report.findings
        c = report.capture
        assert c.intended == c.captured == c.with_0004 == c.without_0004 == [2, 30, 58]


def test_input_convention_draft_is_off_by_one_without_patch_0004(tmp_path, target, patched_tree, pristine_tree):
    draft = write_draft(tmp_path / "draft", eagle3_draft_config((2, 30, 58)), d2t_rows=32000)
    report = run(patched_tree, draft, target, KIMI)
    assert report.verdict == "ok" and report.capture.patch_0004 == "applied"
    assert report.capture.captured == report.capture.intended == [2, 30, 58]
    assert report.capture.without_0004 == [3, 31, 59]  # read from the tree with 0004 reversed

    report = run(pristine_tree, draft, target, DEEPSEEK)
    result = report.finding("captured layers")
    assert result.status == "warn" and report.capture.patch_0004 == "not applied"
    assert report.capture.captured == [3, 31, 59] and report.capture.with_0004 == [2, 30, 58]
    assert "off by +1" in result.message and "apply patch 0004" in result.message
    assert "srt/models/deepseek_v2.py:2963" in result.message  # where the rule that runs lives


def test_the_last_layers_input_is_lost_without_the_patch(tmp_path, target, pristine_tree, patched_tree):
    draft = write_draft(tmp_path / "draft", eagle3_draft_config((2, 30, 60)), d2t_rows=32000)
    report = run(pristine_tree, draft, target, DEEPSEEK)
    result = report.finding("captured layers")
    assert result.status == "fail" and "the output of the last layer 60" in result.message
    assert "the draft gets 2 states, its fc takes 3" in result.message
    assert run(patched_tree, draft, target, KIMI).verdict == "ok"


def test_a_draft_that_names_no_layers_gets_sglangs_default(tmp_path, target, patched_tree):
    draft = write_draft(tmp_path / "draft", eagle3_draft_config(None), d2t_rows=32000)
    report = run(patched_tree, draft, target, KIMI)
    assert report.capture.captured == [2, 30, 58] and report.capture.intended is None
    assert verdicts(report)["aux layer ids"] == "warn" and "does not name" in report.finding("aux layer ids").message


def test_patch_state_is_read_from_the_tree(tmp_path, target, patched_tree, tree_copy):
    from conftest import SERIES_DIR, gnu_patch

    tree = tree_copy(patched_tree)
    assert gnu_patch(tree, SERIES_DIR / "0004-deepseek-eagle3-aux-layer-convention.patch", "-R").returncode == 0
    draft = write_draft(tmp_path / "draft", eagle3_draft_config((2, 30, 58)), d2t_rows=32000)
    report = run(tree, draft, target, KIMI)
    assert report.capture.patch_0004 == "not applied" and report.capture.captured == [3, 31, 59]


# -- what goes wrong ----------------------------------------------------------------------------


def test_mla_draft_is_not_registered_in_0_5_9(tmp_path, target, patched_tree):
    config = eagle3_draft_config((2, 30, 58), architectures=["Eagle3DeepseekV2ForCausalLM"], draft_vocab=KIMI_VOCAB)
    report = run(patched_tree, write_draft(tmp_path / "mla", config), target, KIMI)
    result = report.finding("architecture")
    assert result.status == "fail"
    assert "no class Eagle3DeepseekV2ForCausalLM" in result.message
    assert "LlamaForCausalLMEagle3 (srt/models/llama_eagle3.py:186)" in result.message
    # The layer checks still run: the convention is worth knowing for a newer SGLang.
    assert report.capture.intended == [2, 30, 58]


def test_registered_drafts_come_from_the_source_not_a_list(tmp_path, target, patched_tree, tree_copy):
    tree = tree_copy(patched_tree)
    module = tree / "sglang/srt/models/deepseek_eagle3.py"
    module.write_text("class Eagle3DeepseekV2ForCausalLM:\n    pass\n\n\nEntryClass = [Eagle3DeepseekV2ForCausalLM]\n")
    config = eagle3_draft_config((2, 30, 58), architectures=["Eagle3DeepseekV2ForCausalLM"], draft_vocab=KIMI_VOCAB)
    report = run(tree, write_draft(tmp_path / "mla", config), target, KIMI)
    assert verdicts(report)["architecture"] == "ok"
    assert "srt/models/deepseek_eagle3.py:1" in report.finding("architecture").message


def test_a_model_class_that_is_not_a_draft(tmp_path, target, patched_tree):
    config = eagle3_draft_config((1, 29, 57), architectures=["LlamaForCausalLM"])
    result = run(patched_tree, write_draft(tmp_path / "d", config, 32000), target, KIMI).finding("architecture")
    assert result.status == "fail" and "is a model class here (srt/models/llama.py:" in result.message


def test_hidden_size_the_draft_expects_is_target_hidden_size_when_given(tmp_path, target, patched_tree):
    config = eagle3_draft_config((1, 29, 57), hidden=4096, target_hidden_size=KIMI_HIDDEN)
    report = run(patched_tree, write_draft(tmp_path / "ok", config, 32000), target, KIMI)
    assert verdicts(report)["hidden size"] == "ok"
    assert "target_hidden_size, read at srt/models/llama_eagle3.py:131" in report.finding("hidden size").message
    config = eagle3_draft_config((1, 29, 57), hidden=4096)
    result = run(patched_tree, write_draft(tmp_path / "bad", config, 32000), target, KIMI).finding("hidden size")
    assert (
        result.status == "fail" and "width 4096 (hidden_size, read at srt/models/llama_eagle3.py:133)" in result.message
    )
    assert "target's hidden size is 7168" in result.message and "takes 3 x 4096" in result.message


@pytest.mark.parametrize(
    "field, value",
    [("target_hidden_size", None), ("target_hidden_size", "7168"), ("hidden_size", None), ("num_attention_heads", 0),
     ("intermediate_size", None), ("hidden_act", "gelu"), ("rms_norm_eps", None), ("head_dim", 12.5),
     ("rope_theta", None), ("rope_scaling", [])],
)  # fmt: skip
def test_a_field_the_draft_class_reads_with_an_unusable_value_is_refused(tmp_path, target, patched_tree, field, value):
    """transformers keeps a field given as null as None; SGLang then builds e.g. Linear(None * 3, ...): TypeError."""
    config = eagle3_draft_config((1, 29, 57), **{field: value})
    with pytest.raises(draft_check.DraftInputError, match=rf"{field} must be .*, not {re.escape(repr(value))}"):
        run(patched_tree, write_draft(tmp_path / "d", config, 32000), target, KIMI)


def test_every_config_field_the_draft_class_reads_is_type_checked(pristine_tree):
    """The config reads of SGLang 0.5.9's Llama EAGLE-3 draft and the llama.py layers it builds on, from its source."""
    models = pristine_tree / "sglang" / "srt" / "models"
    sources = [ast.parse((models / "llama_eagle3.py").read_text())]
    llama = ast.parse((models / "llama.py").read_text())
    sources += [c for c in llama.body if isinstance(c, ast.ClassDef)
                and c.name in ("LlamaDecoderLayer", "LlamaAttention", "LlamaMLP")]  # fmt: skip
    read = set()
    for tree in sources:
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and ast.unparse(node.value) in ("config", "self.config", "config_"):
                read.add(node.attr)
            call = ast.unparse(node.func) if isinstance(node, ast.Call) else None
            if call in ("getattr", "hasattr") and ast.unparse(node.args[0]) in ("config", "self.config"):
                read.add(node.args[1].value)
    own_checks = {"vocab_size", "draft_vocab_size", "num_hidden_layers", "tie_word_embeddings"}
    not_types = {
        "model_type",  # the config class's, not the file's
        "bias", "attention_bias",  # only their truth is used
        "rope_is_neox_style",  # likewise
        "original_max_position_embeddings",  # only with rope_scaling, copied into it
        "intermediate_size_mlp",  # llama4_text drafts only
    }  # fmt: skip
    assert read - own_checks - not_types == set(draft_check.DRAFT_CONFIG_FIELDS)


def test_token_mapping(tmp_path, target, patched_tree):
    def mapping(name, **kwargs):
        draft = write_draft(tmp_path / name, eagle3_draft_config((1, 29, 57)), **kwargs)
        return run(patched_tree, draft, target, KIMI).finding("token mapping")

    assert mapping("single", d2t_rows=32000).status == "ok"
    sharded = mapping("sharded", d2t_rows=32000, index=True)
    assert sharded.status == "ok" and "model.safetensors.index.json" in sharded.message
    missing = mapping("missing", d2t_rows=None)
    assert missing.status == "fail" and "no d2t tensor" in missing.message
    wrong = mapping("wrong", d2t_rows=1000)
    assert wrong.status == "fail" and "[1000], expected [32000]" in wrong.message
    config_only = write_config(tmp_path / "config-only", eagle3_draft_config((1, 29, 57)))
    result = run(patched_tree, config_only, target, KIMI).finding("token mapping")
    assert result.status == "warn" and "no weight files" in result.message


def test_vocabulary(tmp_path, target, patched_tree):
    def vocabulary(name, **kwargs):
        draft = write_draft(tmp_path / name, eagle3_draft_config((1, 29, 57), **kwargs), d2t_rows=32000)
        return run(patched_tree, draft, target, KIMI).finding("vocabulary")

    # 0.5.9's LlamaForCausalLMEagle3 reads config.draft_vocab_size unguarded (tied or not).
    missing = vocabulary("missing", draft_vocab=...)
    assert missing.status == "fail" and "srt/models/llama_eagle3.py:210" in missing.message
    tied = vocabulary("tied", draft_vocab=..., tie_word_embeddings=True)
    assert tied.status == "fail" and "srt/models/llama_eagle3.py:222" in tied.message
    assert vocabulary("null", draft_vocab=None).status == "ok"
    other = vocabulary("other-tokenizer", vocab=128256)
    assert other.status == "fail" and "differs from the target's 163840" in other.message


@pytest.mark.parametrize(
    "layer_ids, message",
    [
        ((2, 30, 62), "layer 62 (the target has layers 0-60)"),
        ((2, 30, 61), "the output of the last layer 60"),
        ((1, 29, 60), "the output of the last layer 60"),
        ((0, 29, 57), "neither convention"),
        ((2, 30, 30), "an id is repeated"),
        ((2, 30), "2 ids, but the draft's fc takes 3 states (srt/models/llama_eagle3.py:135)"),
    ],
)
def test_aux_layer_ids_the_target_cannot_serve(tmp_path, target, patched_tree, layer_ids, message):
    draft = write_draft(tmp_path / "draft", eagle3_draft_config(layer_ids), d2t_rows=32000)
    result = run(patched_tree, draft, target, KIMI).finding("aux layer ids")
    assert result.status in ("fail", "warn") and message in result.message
    assert result.status == ("warn" if layer_ids[0] == 0 else "fail")


def test_first_id_zero_is_the_input_of_layer_zero_with_the_patch(tmp_path, target, patched_tree):
    # Patch 0004 (like upstream) takes ids not starting at 1 as they are: layer 0's input does not exist.
    draft = write_draft(tmp_path / "draft", eagle3_draft_config((0, 29, 57)), d2t_rows=32000)
    result = run(patched_tree, draft, target, KIMI).finding("captured layers")
    assert result.status == "fail" and "TypeError" in result.message


def test_draft_layers(tmp_path, target, patched_tree):
    config = eagle3_draft_config((1, 29, 57), num_hidden_layers=2)
    result = run(patched_tree, write_draft(tmp_path / "d", config, 32000), target, KIMI).finding("layers")
    assert result.status == "fail" and "accepts 1" in result.message and "llama_eagle3.py:198" in result.message


# -- the command line, hub ids, bad input ---------------------------------------------------------


def test_probe_draft_text_and_json(tmp_path, target, patched_tree, run_cli):
    draft = write_draft(tmp_path / "draft", eagle3_draft_config((2, 30, 58)), d2t_rows=32000)
    args = ("probe", "--sglang", str(patched_tree), "--set", f"model_path={target}", "--draft", str(draft))
    result = run_cli(*args)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "[ OK ] captured layers: the inputs of layers [2, 30, 58]" in result.stdout
    assert "without patch 0004   [3, 31, 59]" in result.stdout
    data = json.loads(run_cli(*args, "--json").stdout)
    assert data["verdict"] == "warn"  # the all-reduce flags on 12.0 warn; nothing fails
    assert data["draft"]["verdict"] == "ok" and data["draft"]["capture"]["captured"] == [2, 30, 58]
    assert any(f["name"] == "draft layers" and f["status"] == "ok" for f in data["findings"])
    assert data["draft"]["target"]["num_layers"] == 61 and data["arch"] == KIMI  # from model_path's config.json

    bad = write_draft(tmp_path / "bad", eagle3_draft_config((1, 29, 57), hidden=4096), d2t_rows=32000)
    result = run_cli("probe", "--sglang", str(patched_tree), "--set", f"model_path={target}", "--draft", str(bad))
    assert (
        result.returncode == 1 and "Verdict: FAIL" in result.stdout and "  [FAIL] draft hidden size:" in result.stdout
    )


def test_hub_ids_are_read_from_the_local_cache(tmp_path, patched_tree, run_cli):
    from huggingface_hub import scan_cache_dir

    cache = tmp_path / "hub"
    kimi_target(hub_cache_snapshot(cache, "nvidia/Kimi-K2.5-NVFP4"))
    write_draft(hub_cache_snapshot(cache, "someone/kimi-eagle3"), eagle3_draft_config((2, 30, 58)), d2t_rows=32000)
    assert {r.repo_id for r in scan_cache_dir(cache).repos} == {"nvidia/Kimi-K2.5-NVFP4", "someone/kimi-eagle3"}
    env = {"HF_HUB_CACHE": str(cache), "HF_HUB_OFFLINE": "1"}
    result = run_cli("probe", "--sglang", str(patched_tree), "--draft", "someone/kimi-eagle3", "--json", env=env)
    data = json.loads(result.stdout)
    assert data["draft"]["draft_source"] == "Hugging Face cache" and data["draft"]["verdict"] == "ok"
    assert data["draft"]["target"]["given"] == "nvidia/Kimi-K2.5-NVFP4"  # the launcher's default model_path
    assert data["draft"]["target"]["num_layers"] == 61

    result = run_cli("probe", "--sglang", str(patched_tree), "--draft", "someone/not-downloaded", env=env)
    assert result.returncode == 0  # a warning, not a failure: the check happens after download
    assert "[WARN] files: someone/not-downloaded is not in the local Hugging Face cache" in result.stdout
    assert "checked only after download" in result.stdout


@pytest.mark.parametrize(
    "content, message",
    [
        (None, "has no config.json"),
        (b"{not json", "is not valid JSON: Expecting property name enclosed in double quotes at line 1, column 2"),
        (b"[1, 2]", "must hold a JSON object, not a JSON list"),
        (b"\xff\xfe{}", "is not UTF-8 text"),
        (json.dumps(eagle3_draft_config("2,30,58")).encode(), "eagle_aux_hidden_state_layer_ids must be a list of"),
        (json.dumps(eagle3_draft_config((1, 29, 57), hidden="7168")).encode(), "hidden_size must be an integer"),
        (json.dumps(eagle3_draft_config((1, 29, 57), architectures="X")).encode(), "architectures must be a non-"),
        (json.dumps(eagle3_draft_config((1, 29, 57), eagle_config=[1])).encode(), "eagle_config must be a JSON obj"),
        (json.dumps(eagle3_draft_config(())).encode(), "eagle_aux_hidden_state_layer_ids is empty"),
        (json.dumps({"architectures": ["LlamaForCausalLMEagle3"]}).encode(), "has no num_hidden_layers"),
        (
            json.dumps(eagle3_draft_config((1, 29, 57), target_hidden_size=None)).encode(),
            "target_hidden_size must be an integer >= 1, not None (read whenever present",
        ),
    ],
)
def test_bad_draft_input_is_exit_2_with_a_clear_message(tmp_path, target, patched_tree, run_cli, content, message):
    draft = tmp_path / "draft"
    draft.mkdir()
    if content is not None:
        (draft / "config.json").write_bytes(content)
    result = run_cli("probe", "--sglang", str(patched_tree), "--set", f"model_path={target}", "--draft", str(draft))
    assert result.returncode == 2, result.stdout + result.stderr
    assert message in result.stderr and "Traceback" not in result.stdout + result.stderr


@pytest.mark.parametrize(
    "target_config, model, message",
    [
        ({"architectures": [KIMI], "text_config": "big"}, None, "text_config must be a JSON object"),
        ({"architectures": [KIMI], "text_config": {"hidden_size": 7168}}, None, "has no num_hidden_layers"),
        (None, "{missing}/kimi", "target model {missing}/kimi is not a directory"),
        (None, "not a hub id!", "is neither an existing directory nor a Hugging Face id"),
    ],
)
def test_bad_target_input_is_exit_2(tmp_path, patched_tree, run_cli, target_config, model, message):
    draft = write_draft(tmp_path / "draft", eagle3_draft_config((1, 29, 57)), d2t_rows=32000)
    if model is None:
        model = str(write_config(tmp_path / "target", target_config))
    missing = str(missing_path(tmp_path))  # the test's own: a fixed /nonexistent/kimi may exist on a busy machine
    model, message = model.replace("{missing}", missing), message.replace("{missing}", missing)
    result = run_cli(
        "probe", "--sglang", str(patched_tree), "--arch", KIMI, "--set", f"model_path={model}", "--draft", str(draft)
    )
    assert result.returncode == 2 and message in result.stderr, result.stdout + result.stderr
    assert "Traceback" not in result.stdout + result.stderr


# -- serve's preflight ------------------------------------------------------------------------------


def preflight_checks(tmp_path, tree, **overrides):
    s = settings.ServerSettings(port=free_port(), **overrides)
    report = preflight.preflight(s, str(tree), nvidia_smi=fake_nvidia_smi(tmp_path, "8x-rtx-pro-6000.csv"))
    return report, {f.name: f for f in report.findings}


def test_preflight_runs_the_draft_checks(tmp_path, target, patched_tree):
    draft = write_draft(tmp_path / "draft", eagle3_draft_config((2, 30, 58)), d2t_rows=32000)
    report, checks = preflight_checks(tmp_path, patched_tree, model_path=str(target),
                                      speculative_draft_model_path=str(draft))  # fmt: skip
    assert report.passed, report.findings
    assert checks["draft captured layers"].status == "ok" and "[2, 30, 58]" in checks["draft captured layers"].message
    assert checks["draft token mapping"].status == "ok"

    shutil.rmtree(draft)
    write_draft(draft, eagle3_draft_config((2, 30, 58), hidden=4096), d2t_rows=32000)
    report, checks = preflight_checks(tmp_path, patched_tree, model_path=str(target),
                                      speculative_draft_model_path=str(draft))  # fmt: skip
    assert not report.passed and checks["draft hidden size"].status == "fail"


def test_preflight_reports_bad_draft_config_and_uncached_hub_ids(tmp_path, target, patched_tree, monkeypatch):
    draft = write_config(tmp_path / "draft", {"architectures": "LlamaForCausalLMEagle3"})
    report, checks = preflight_checks(tmp_path, patched_tree, model_path=str(target),
                                      speculative_draft_model_path=str(draft))  # fmt: skip
    assert checks["draft"].status == "fail" and "architectures must be" in checks["draft"].message

    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-cache"))
    report, checks = preflight_checks(tmp_path, patched_tree, model_path=str(target),
                                      speculative_draft_model_path="someone/kimi-eagle3")  # fmt: skip
    assert report.passed and checks["draft files"].status == "warn"

    report, checks = preflight_checks(tmp_path, patched_tree, speculative_algorithm=None)
    assert not any(name.startswith("draft") for name in checks)


def test_serve_dry_run_stops_on_a_draft_that_cannot_work(tmp_path, target, patched_tree, run_cli):
    draft = write_draft(tmp_path / "draft", eagle3_draft_config((2, 30, 58), num_hidden_layers=2), d2t_rows=32000)
    result = run_cli(
        "serve", "--dry-run", "--sglang", str(patched_tree), "--set", f"model_path={target}",
        "--set", f"speculative_draft_model_path={draft}", "--set", f"port={free_port()}",
        env={"SGLANG_EAGLE3_NVIDIA_SMI": fake_nvidia_smi(tmp_path, "8x-rtx-pro-6000.csv")},
    )  # fmt: skip
    assert result.returncode == 1
    assert "[FAIL] draft layers: the draft has 2 layers" in result.stdout


def test_construction_verdicts_match_the_real_draft_class_on_cpu(tmp_path, pristine_tree):
    """What the probe says will fail at draft load does fail when SGLang's real class is built."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    from conftest import STAND_INS

    tiny = {"hidden": 64, "vocab": 256, "intermediate_size": 128, "num_attention_heads": 4, "num_key_value_heads": 4}
    drafts = {
        "good": eagle3_draft_config((1, 3, 5), draft_vocab=128, **tiny),
        "target_width": eagle3_draft_config((1, 3, 5), draft_vocab=128, target_hidden_size=96, **tiny),
        "full_vocabulary": eagle3_draft_config((1, 3, 5), draft_vocab=None, **tiny),
        "no_draft_vocab": eagle3_draft_config((1, 3, 5), draft_vocab=..., **tiny),
        "no_draft_vocab_tied": eagle3_draft_config((1, 3, 5), draft_vocab=..., tie_word_embeddings=True, **tiny),
        "two_layers": eagle3_draft_config((1, 3, 5), draft_vocab=128, num_hidden_layers=2, **tiny),
    }
    dirs = {name: write_draft(tmp_path / name, config, d2t_rows=128) for name, config in drafts.items()}
    driver = Path(__file__).parent / "support" / "drivers" / "eagle3_draft_driver.py"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(pristine_tree), str(STAND_INS)])}
    result = subprocess.run([sys.executable, str(driver), json.dumps([str(d) for d in dirs.values()])],
                            capture_output=True, text=True, env=env, timeout=600)  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    built = {name: json.loads(result.stdout.strip().splitlines()[-1])[str(d)] for name, d in dirs.items()}
    target = kimi_target(tmp_path / "target", layers=8, hidden=64, vocab=256)
    for name, directory in dirs.items():
        report = run(pristine_tree, directory, target, DEEPSEEK)
        load_checks = {c: verdicts(report)[c] for c in ("layers", "vocabulary")}
        fails_at_load = "fail" in load_checks.values()
        assert fails_at_load == (not built[name]["ok"]), (name, load_checks, built[name])
    assert "AttributeError" in built["no_draft_vocab_tied"]["error"] and "ValueError" in built["two_layers"]["error"]
    # The fc takes three states of the width the probe reads (target_hidden_size when given).
    assert built["good"]["fc_in"] == 3 * 64 and built["target_width"]["fc_in"] == 3 * 96
    assert verdicts(run(pristine_tree, dirs["target_width"], target, DEEPSEEK))["hidden size"] == "fail"


# Published facts docs/draft-checks.md's table of known drafts rests on (the fields the checks read).
KNOWN_DRAFTS = {
    # huggingface.co/k-l-lambda/Kimi-K2.5-Eagle3/blob/main/config.json
    "k-l-lambda/Kimi-K2.5-Eagle3": {
        "architectures": ["Eagle3DeepseekV2ForCausalLM"], "hidden_size": 7168, "num_hidden_layers": 1,
        "vocab_size": 163840, "draft_vocab_size": 163840, "tie_word_embeddings": False,
        "eagle_config": {"eagle_aux_hidden_state_layer_ids": [2, 30, 58], "use_aux_hidden_state": True},
    },
    # TorchSpec's configs/draft_models/kimi_k25_eagle3.json, the template of lightseekorg/kimi-k2.5-eagle3
    "TorchSpec kimi_k25_eagle3 template": {
        "architectures": ["LlamaForCausalLMEagle3"], "hidden_size": 7168, "num_hidden_layers": 1,
        "vocab_size": 163840, "tie_word_embeddings": False,
    },
}  # fmt: skip


def test_known_drafts_in_the_readme(tmp_path, target, patched_tree, pristine_tree):
    drafts = {name: write_config(tmp_path / name.replace("/", "--").replace(" ", "-"), config)
              for name, config in KNOWN_DRAFTS.items()}  # fmt: skip
    mla = run(patched_tree, drafts["k-l-lambda/Kimi-K2.5-Eagle3"], target, KIMI)
    ready = ("hidden size", "vocabulary", "token mapping", "aux layer ids", "captured layers")
    assert verdicts(mla) == {"algorithm": "not_checked", "architecture": "fail", **dict.fromkeys(ready, "ok")}
    assert mla.capture.captured == [2, 30, 58] and mla.capture.without_0004 == [3, 31, 59]
    unpatched = run(pristine_tree, drafts["k-l-lambda/Kimi-K2.5-Eagle3"], target, DEEPSEEK)
    assert "off by +1" in unpatched.finding("captured layers").message
    template = run(patched_tree, drafts["TorchSpec kimi_k25_eagle3 template"], target, KIMI)
    assert verdicts(template)["vocabulary"] == "fail"
    assert "llama_eagle3.py:210" in template.finding("vocabulary").message
    assert verdicts(template)["aux layer ids"] == "warn" and template.capture.captured == [2, 30, 58]
