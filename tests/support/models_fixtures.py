"""A small generated model repository on the stand-in hub, and `sglang-eagle3 models` run against it."""

from __future__ import annotations

import functools
import hashlib
import json
import os
import random
import subprocess
import sys
from pathlib import Path

from stand_ins.fake_hub import FakeHub

REPO_ID = "test-org/tiny-eagle3"
MiB = 1 << 20


@functools.cache
def sample_files(seed: int = 0) -> dict[str, bytes]:
    """A model repository as the hub holds one: LFS weights of some MB, small files in git."""
    rng = random.Random(seed)
    config = {"architectures": ["LlamaForCausalLMEagle3"], "hidden_size": 64, "num_hidden_layers": 1}
    index = {"weight_map": {"lm_head.weight": "model-00002-of-00002.safetensors"}}
    return {
        ".gitattributes": b"*.safetensors filter=lfs diff=lfs merge=lfs -text\n*.model filter=lfs diff=lfs -text\n",
        "README.md": b"# tiny-eagle3\nA generated stand-in model.\n",
        "config.json": json.dumps(config, indent=2).encode(),
        "generation_config.json": b'{"do_sample": false}\n',
        "model.safetensors.index.json": json.dumps(index).encode(),
        # More than two of huggingface_hub's 10 MiB write chunks: a download stopped midway leaves
        # a partial file that the next run resumes with a Range request.
        "model-00001-of-00002.safetensors": rng.randbytes(23 * MiB),
        "model-00002-of-00002.safetensors": rng.randbytes(12 * MiB),
        "tokenizer.model": rng.randbytes(1_500_000),
        "tokenizer_config.json": b'{"model_max_length": 4096}\n',
        "original/params.json": b'{"dim": 64}\n',
        "notes/read me+v2 (draft).txt": b"a file name that needs quoting in URLs\n",
    }


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def hub_with_model(gated: bool = False, tokens: tuple[str, ...] = ()) -> FakeHub:
    hub = FakeHub()
    hub.commit(REPO_ID, sample_files(), gated=gated)
    hub.repos[REPO_ID].tokens.update(tokens)
    return hub


def models_env(hub: FakeHub, home: Path, **extra: str) -> dict[str, str]:
    """The test's environment without any Hugging Face setup of the user, pointed at the stand-in."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGING_FACE", "CREDENTIALS_DIRECTORY"))}
    env.update(HF_ENDPOINT=hub.url, HF_HOME=str(home / "hf-home"), **extra)
    return env


def models_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "sglang_eagle3.cli", "models", *args]


def run_models(env: dict, *args: str, timeout: float = 300) -> tuple[int, dict | None, str, str]:
    """Run `sglang-eagle3 models ARGS --json`: exit code, parsed JSON, stdout, stderr."""
    result = subprocess.run(models_cmd(*args, "--json"), capture_output=True, text=True, env=env, timeout=timeout)
    try:
        data = json.loads(result.stdout)
    except json.JSONDecodeError:
        data = None
    return result.returncode, data, result.stdout, result.stderr


def locked_files_in(directory: Path, lock: dict) -> dict[str, bool]:
    """Every locked name present in the directory -> does it hold exactly the locked bytes?"""
    out = {}
    for f in lock["files"]:
        path = directory / f["path"]
        if path.exists():
            out[f["path"]] = path.stat().st_size == f["size"] and sha256(path.read_bytes()) == f["sha256"]
    return out
