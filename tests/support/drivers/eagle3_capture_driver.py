"""Run a real forward pass of a tiny KimiK25 (DeepSeek-V3 inside) on CPU and report which
hidden states SGLang hands to the EAGLE-3 draft.

Run in a subprocess with PYTHONPATH=<sglang tree>:<tests/stand_ins>, so the tree under
test (pristine or patched) is the sglang that gets imported. Argument: a JSON object
{"num_hidden_layers": n, "cases": {"name": [ids] or null, ...}}. Prints one JSON object
on its last line, per case:

  layers_to_capture   what set_eagle3_layers_to_capture set on the inner model
  inputs_of           for each captured state, the layers whose *input* it equals exactly
  outputs_of          for each captured state, the layers whose *output* it equals exactly
  error               what the forward pass raised, if it did

The captured states are taken where the draft gets them: LogitsProcessorOutput.hidden_states
of the whole model's forward (KimiK25 -> DeepseekV3ForCausalLM -> logits processor), with
CaptureHiddenMode.FULL. Every layer's input and output are recorded by hooks on the real
decoder layers, so the comparison does not trust SGLang's own bookkeeping.
"""

from __future__ import annotations

import json
import sys
import traceback
from types import SimpleNamespace

import kimi_cpu_driver  # sets SGLANG_USE_CPU_ENGINE before torch/sglang are imported
import torch

SEQUENCE = [3, 17, 42, 99, 7, 128, 5, 64]


def residual_stream(hidden_states: torch.Tensor, residual: torch.Tensor | None) -> torch.Tensor:
    # DeepSeek layers pass (hidden_states, residual); the residual stream is their sum,
    # which is also what DeepseekV2Model appends as an aux hidden state.
    return hidden_states if residual is None else hidden_states + residual


def forward_batch(ids: torch.Tensor, num_layers: int, cfg: dict):
    """A real EXTEND ForwardBatch over real CPU pools and SGLang's torch-native attention backend."""
    from sglang.srt.layers.attention.torch_native_backend import TorchNativeAttnBackend
    from sglang.srt.mem_cache.memory_pool import MLATokenToKVPool, ReqToTokenPool
    from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode, ForwardBatch, ForwardMode

    n = len(ids)
    req_to_token = ReqToTokenPool(size=2, max_context_len=64, device="cpu", enable_memory_saver=False)
    req_to_token.req_to_token[0, :n] = torch.arange(n, dtype=torch.int32)
    kv_cache = MLATokenToKVPool(
        size=64, page_size=1, dtype=torch.bfloat16, kv_lora_rank=cfg["kv_lora_rank"],
        qk_rope_head_dim=cfg["qk_rope_head_dim"], layer_num=num_layers, device="cpu", enable_memory_saver=False,
    )  # fmt: skip
    return ForwardBatch(
        forward_mode=ForwardMode.EXTEND, batch_size=1, input_ids=ids, req_pool_indices=torch.tensor([0]),
        seq_lens=torch.tensor([n]), seq_lens_cpu=torch.tensor([n]), seq_lens_sum=n, out_cache_loc=torch.arange(n),
        positions=torch.arange(n), extend_num_tokens=n, extend_seq_lens=torch.tensor([n]),
        extend_prefix_lens=torch.tensor([0]), extend_start_loc=torch.tensor([0]), extend_prefix_lens_cpu=[0],
        extend_seq_lens_cpu=[n], req_to_token_pool=req_to_token, token_to_kv_pool=kv_cache,
        attn_backend=TorchNativeAttnBackend(SimpleNamespace(device="cpu")), capture_hidden_mode=CaptureHiddenMode.FULL,
    )  # fmt: skip


def main() -> None:
    request = json.loads(sys.argv[1])
    num_layers = request["num_hidden_layers"]
    cfg = {**kimi_cpu_driver.TEXT_CONFIG, "num_hidden_layers": num_layers}
    model = kimi_cpu_driver.build_model(cfg)
    inner = model.language_model
    # Weights start as uninitialised memory; deterministic values keep every state finite.
    torch.manual_seed(0)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.normal_(0, 0.05)

    layer_inputs: dict[int, torch.Tensor] = {}
    layer_outputs: dict[int, torch.Tensor] = {}
    for index, layer in enumerate(inner.model.layers):
        # DeepseekV2DecoderLayer.forward(positions, hidden_states, forward_batch, residual, ...)
        layer.register_forward_pre_hook(
            lambda _m, args, i=index: layer_inputs.__setitem__(i, residual_stream(args[1], args[3]))
        )
        layer.register_forward_hook(lambda _m, _a, out, i=index: layer_outputs.__setitem__(i, residual_stream(*out)))

    # Patch 0001 gives the wrapper the method; on a pristine tree call the inner model directly.
    via = "wrapper" if hasattr(model, "set_eagle3_layers_to_capture") else "inner model"
    set_layers = getattr(model, "set_eagle3_layers_to_capture", inner.set_eagle3_layers_to_capture)
    ids = torch.tensor(SEQUENCE)
    results = {"num_hidden_layers": num_layers, "set_via": via, "cases": {}}
    for name, layer_ids in request["cases"].items():
        inner.model.layers_to_capture = []
        layer_inputs.clear()
        layer_outputs.clear()
        set_layers(layer_ids)
        case = {"layers_to_capture": list(inner.model.layers_to_capture)}
        try:
            with torch.no_grad():
                output = model(ids, torch.arange(len(ids)), forward_batch(ids, num_layers, cfg))
        except Exception as err:  # what users would see at the first forward pass
            case["error"] = f"{type(err).__name__}: {err}"
            case["traceback"] = traceback.format_exc()[-2000:]
        else:
            chunks = output.hidden_states.split(cfg["hidden_size"], dim=-1)
            case["inputs_of"] = [[i for i, x in sorted(layer_inputs.items()) if torch.equal(c, x)] for c in chunks]
            case["outputs_of"] = [[i for i, x in sorted(layer_outputs.items()) if torch.equal(c, x)] for c in chunks]
            case["finite"] = bool(torch.isfinite(output.hidden_states).all())
        results["cases"][name] = case
    sys.stdout.flush()
    print(json.dumps(results))


if __name__ == "__main__":
    main()
