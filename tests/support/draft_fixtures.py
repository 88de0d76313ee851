"""Tiny target and draft model directories for the draft-check tests: config.json, real safetensors
files (written by the safetensors library), and a Hugging Face cache laid out as huggingface_hub
lays it out (checked with huggingface_hub's own scan_cache_dir)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from safetensors.numpy import save_file

KIMI_LAYERS, KIMI_HIDDEN, KIMI_VOCAB = 61, 7168, 163840  # Kimi-K2.5's text model


def kimi_target(directory: Path, layers=KIMI_LAYERS, hidden=KIMI_HIDDEN, vocab=KIMI_VOCAB) -> Path:
    """A Kimi-K2.5-shaped config.json: the text model nested under text_config, as the real one."""
    text = {"architectures": ["DeepseekV3ForCausalLM"], "model_type": "kimi_k2", "hidden_size": hidden,
            "num_hidden_layers": layers, "vocab_size": vocab}  # fmt: skip
    return write_config(directory, {"architectures": ["KimiK25ForConditionalGeneration"], "model_type": "kimi_k25",
                                    "text_config": text, "vision_config": {"hidden_size": 1152}})  # fmt: skip


def eagle3_draft_config(
    layer_ids=(1, 29, 57), hidden=KIMI_HIDDEN, vocab=KIMI_VOCAB, draft_vocab=32000, **extra
) -> dict:
    config = {
        "architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama", "hidden_size": hidden,
        "num_hidden_layers": 1, "num_attention_heads": 8, "vocab_size": vocab, "draft_vocab_size": draft_vocab,
        "tie_word_embeddings": False,
    }  # fmt: skip
    if layer_ids is not None:
        config["eagle_config"] = {"eagle_aux_hidden_state_layer_ids": list(layer_ids), "use_aux_hidden_state": True}
    config.update(extra)
    return {k: v for k, v in config.items() if v is not ...}  # ... removes a key


def write_config(directory: Path, config: dict) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(json.dumps(config))
    return directory


def write_weights(directory: Path, d2t_rows: int | None, index: bool = False) -> None:
    """Draft weights: an fc stand-in, and d2t with ``d2t_rows`` rows (None: no d2t)."""
    tensors = {"fc.weight": np.zeros((4, 12), dtype=np.float16)}
    if d2t_rows is not None:
        tensors["d2t"] = np.zeros(d2t_rows, dtype=np.int64)
        tensors["t2d"] = np.zeros(4, dtype=np.bool_)
    if not index:
        save_file(tensors, str(directory / "model.safetensors"))
        return
    shards = {"model-00001-of-00002.safetensors": {"fc.weight": tensors.pop("fc.weight")},
              "model-00002-of-00002.safetensors": tensors}  # fmt: skip
    for name, part in shards.items():
        save_file(part, str(directory / name))
    weight_map = {tensor: name for name, part in shards.items() for tensor in part}
    (directory / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))


def write_draft(directory: Path, config: dict, d2t_rows: int | None = None, index: bool = False) -> Path:
    write_config(directory, config)
    write_weights(directory, d2t_rows, index)
    return directory


def hub_cache_snapshot(cache: Path, repo_id: str, revision: str = "0123456789abcdef0123456789abcdef01234567") -> Path:
    """The snapshot directory of ``repo_id`` in a Hugging Face cache at ``cache`` (HF_HUB_CACHE).

    Layout as documented for huggingface_hub's cache: models--org--name/{refs/main, snapshots/<rev>/}.
    Files written into the returned directory are what a completed download leaves there.
    """
    repo = cache / f"models--{repo_id.replace('/', '--')}"
    (repo / "refs").mkdir(parents=True, exist_ok=True)
    (repo / "refs" / "main").write_text(revision)
    (repo / "blobs").mkdir(exist_ok=True)
    snapshot = repo / "snapshots" / revision
    snapshot.mkdir(parents=True, exist_ok=True)
    return snapshot
