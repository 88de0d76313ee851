"""Build SGLang's real EAGLE-3 draft class on CPU from draft config.json files, as SGLang loads them.

Run in a subprocess with PYTHONPATH=<sglang tree>:<tests/stand_ins>. Argument: a JSON list of
draft directories. Each config is read with transformers' AutoConfig (what SGLang's
ModelConfig does) and LlamaForCausalLMEagle3 is constructed from it. Prints one JSON object
on its last line: per directory, ``ok`` and either the fc's input width or the error.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile

os.environ["SGLANG_USE_CPU_ENGINE"] = "1"

import torch  # noqa: E402

SCRATCH = tempfile.TemporaryDirectory(prefix="tiny-draft-")  # the rendezvous file: removed when the process ends


def init_single_process(model_dir: str, scratch: str) -> None:
    from sglang.srt.distributed import init_distributed_environment, initialize_model_parallel
    from sglang.srt.layers.dp_attention import initialize_dp_attention
    from sglang.srt.server_args import ServerArgs, set_global_server_args_for_scheduler

    server_args = ServerArgs(model_path=model_dir, device="cpu")
    set_global_server_args_for_scheduler(server_args)
    init_distributed_environment(
        backend="gloo", world_size=1, rank=0, local_rank=0, distributed_init_method=f"file://{scratch}/rendezvous"
    )
    initialize_model_parallel(1)

    class DpAttentionModelConfig:  # the two fields initialize_dp_attention reads
        hidden_size = 64
        dtype = torch.bfloat16

    initialize_dp_attention(server_args, DpAttentionModelConfig)


def main() -> None:
    from transformers import AutoConfig

    directories = json.loads(sys.argv[1])
    init_single_process(directories[0], SCRATCH.name)
    from sglang.srt.models.llama_eagle3 import LlamaForCausalLMEagle3

    results = {}
    for directory in directories:
        try:
            config = AutoConfig.from_pretrained(directory)
            model = LlamaForCausalLMEagle3(config)
            results[directory] = {
                "ok": True,
                "fc_in": model.model.fc.in_features,
                "lm_head": model.lm_head.weight.shape[0],
            }
        except Exception as err:  # what SGLang would raise when it loads this draft
            results[directory] = {"ok": False, "error": f"{type(err).__name__}: {err}"}
    sys.stdout.flush()
    print(json.dumps(results))


if __name__ == "__main__":
    main()
