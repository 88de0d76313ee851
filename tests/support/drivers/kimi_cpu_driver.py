"""Build a real, tiny KimiK25ForConditionalGeneration on CPU and exercise the EAGLE-3 methods.

Run in a subprocess with PYTHONPATH=<sglang tree>:<tests/stand_ins>, so the tree under
test (pristine or patched) is the sglang that gets imported. Prints one JSON object
on its last line: for each method, what happened, checked against the inner
DeepseekV3ForCausalLM it should reach.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import traceback

os.environ["SGLANG_USE_CPU_ENGINE"] = "1"

import torch  # noqa: E402

TEXT_CONFIG = dict(
    architectures=["DeepseekV3ForCausalLM"],
    model_type="deepseek_v3",
    vocab_size=256,
    hidden_size=64,
    intermediate_size=128,
    moe_intermediate_size=32,
    num_hidden_layers=8,
    num_attention_heads=4,
    num_key_value_heads=4,
    n_routed_experts=4,
    n_shared_experts=1,
    num_experts_per_tok=2,
    n_group=1,
    topk_group=1,
    first_k_dense_replace=1,
    moe_layer_freq=1,
    topk_method="noaux_tc",
    scoring_func="sigmoid",
    routed_scaling_factor=2.5,
    norm_topk_prob=True,
    q_lora_rank=32,
    kv_lora_rank=16,
    qk_nope_head_dim=16,
    qk_rope_head_dim=8,
    v_head_dim=16,
    max_position_embeddings=256,
    rope_theta=10000.0,
    rope_scaling=dict(
        type="yarn",
        factor=2.0,
        original_max_position_embeddings=128,
        beta_fast=32,
        beta_slow=1,
        mscale=1.0,
        mscale_all_dim=1.0,
    ),
    torch_dtype="bfloat16",
    tie_word_embeddings=False,
)
VISION_CONFIG = dict(
    patch_size=14,
    init_pos_emb_height=8,
    init_pos_emb_width=8,
    init_pos_emb_time=4,
    num_attention_heads=2,
    num_hidden_layers=1,
    hidden_size=32,
    vt_hidden_size=32,
    intermediate_size=64,
    mm_hidden_size=32,
    text_hidden_size=64,
)


# The models' configs and rendezvous files: removed when the process ends.
SCRATCH = tempfile.TemporaryDirectory(prefix="tiny-kimi-k25-")


def build_model(text_config: dict = TEXT_CONFIG):
    from sglang.srt.configs.kimi_k25 import KimiK25Config
    from sglang.srt.distributed import init_distributed_environment, initialize_model_parallel
    from sglang.srt.layers.dp_attention import initialize_dp_attention
    from sglang.srt.models.kimi_k25 import KimiK25ForConditionalGeneration
    from sglang.srt.server_args import ServerArgs, set_global_server_args_for_scheduler

    model_dir = tempfile.mkdtemp(dir=SCRATCH.name)
    config = dict(
        architectures=["KimiK25ForConditionalGeneration"],
        model_type="kimi_k25",
        text_config=text_config,
        vision_config=VISION_CONFIG,
    )
    with open(os.path.join(model_dir, "config.json"), "w") as f:
        json.dump(config, f)
    server_args = ServerArgs(model_path=model_dir, device="cpu", trust_remote_code=True)
    set_global_server_args_for_scheduler(server_args)
    init_distributed_environment(
        backend="gloo", world_size=1, rank=0, local_rank=0, distributed_init_method=f"file://{model_dir}/rendezvous"
    )
    initialize_model_parallel(1)

    class DpAttentionModelConfig:  # the two fields initialize_dp_attention reads
        hidden_size = text_config["hidden_size"]
        dtype = torch.bfloat16

    initialize_dp_attention(server_args, DpAttentionModelConfig)
    return KimiK25ForConditionalGeneration(KimiK25Config(text_config=text_config, vision_config=VISION_CONFIG))


def attempt(fn):
    try:
        return {"ok": True, **fn()}
    except Exception as err:  # report exactly what users would see
        return {"ok": False, "error": f"{type(err).__name__}: {err}", "traceback": traceback.format_exc()}


def capture_state(inner):
    return {
        "capture_aux_hidden_states": bool(getattr(inner, "capture_aux_hidden_states", False)),
        "layers_to_capture": list(getattr(inner.model, "layers_to_capture", [])),
    }


def reset_capture(inner):
    inner.capture_aux_hidden_states = False
    inner.model.layers_to_capture = []


def main() -> None:
    model = build_model()
    inner = model.language_model
    results = {"inner_class": type(inner).__name__, "num_hidden_layers": TEXT_CONFIG["num_hidden_layers"]}

    def get_embed_and_head():
        embed, head = model.get_embed_and_head()
        return {
            "embed_is_inner": embed is inner.model.embed_tokens.weight,
            "head_is_inner": head is inner.lm_head.weight,
            "embed_shape": list(embed.shape),
        }

    results["get_embed_and_head"] = attempt(get_embed_and_head)

    def set_eagle3_layers_to_capture(layer_ids):
        def run():
            reset_capture(inner)
            before = capture_state(inner)
            model.set_eagle3_layers_to_capture(layer_ids)
            via_wrapper = capture_state(inner)
            reset_capture(inner)
            inner.set_eagle3_layers_to_capture(layer_ids)  # the reference: the inner model called directly
            return {"before": before, "via_wrapper": via_wrapper, "direct": capture_state(inner)}

        return run

    results["set_eagle3_layers_to_capture_default"] = attempt(set_eagle3_layers_to_capture(None))
    results["set_eagle3_layers_to_capture_ids"] = attempt(set_eagle3_layers_to_capture([1, 3, 5]))

    def set_embed_and_head():
        # DeepseekV2ForCausalLM.set_embed_and_head ends with torch.cuda.empty_cache() and
        # torch.cuda.synchronize(), which need a GPU. Those two calls, and only those, are
        # made no-ops here; the tensor replacement is the real code.
        torch.cuda.empty_cache = lambda: None
        torch.cuda.synchronize = lambda *a, **k: None
        embed = torch.nn.Parameter(torch.full_like(inner.model.embed_tokens.weight, 0.5))
        head = torch.nn.Parameter(torch.full_like(inner.lm_head.weight, -0.5))
        model.set_embed_and_head(embed, head)
        return {
            "embed_replaced": inner.model.embed_tokens.weight is embed,
            "head_replaced": inner.lm_head.weight is head,
            "roundtrip": all(a is b for a, b in zip(model.get_embed_and_head(), (embed, head), strict=True)),
        }

    results["set_embed_and_head"] = attempt(set_embed_and_head)
    sys.stdout.flush()
    print(json.dumps(results))


if __name__ == "__main__":
    main()
