"""The API keys never show: not in any output, argv, environment or log, SGLang's own included.

The main test runs the real launch path: `sglang-eagle3 serve` (preflight, launch plan,
launcher) starts `python -m sglang_eagle3.sglang_main` on SGLang 0.5.9 unpacked from the
pinned wheel, which parses its arguments, reads the keys from their files and starts the
server: it logs `server_args=ServerArgs(...)` and spawns its scheduler process, which gets
as far as building the model on CPU. Everything it printed, and the command line and
environment of every process it started, is searched for the keys.

What stands in for the GPU, and why:
- a tiny Llama config.json with `--load-format dummy` (no weights) and
  `--skip-tokenizer-init` (no tokenizer files): no model can be downloaded here;
- `--device cpu` and a recorded `nvidia-smi` output for the preflight (no GPU here);
- tests/stand_ins/sgl_kernel: SGLang imports the CUDA kernel package unguarded, and it
  cannot load without a GPU (see its docstring).
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import sglang_eagle3
from bench_fixtures import free_port
from conftest import STAND_INS
from processes import descendants
from test_preflight import fake_nvidia_smi

TINY_LLAMA = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 256, "hidden_size": 64,
    "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 4,
    "max_position_embeddings": 256, "rms_norm_eps": 1e-6, "torch_dtype": "float32",
}  # fmt: skip
PACKAGE_ROOT = Path(sglang_eagle3.__file__).resolve().parents[1]


def private_file(path: Path, text: str) -> Path:
    path.write_text(text)
    path.chmod(0o600)
    return path


def run_and_watch(argv: list[str], env: dict[str, str], until: str, timeout: float = 240):
    """Run argv; while it runs, record the cmdline and environ of every process below it.

    Once `until` has appeared in its stderr and a child of the server was seen, stop it
    with SIGTERM (as systemd would). Returns (returncode, stdout, stderr, {pid: (cmdline, environ)}).
    """
    out_path, err_path = Path(env["TMPDIR"]) / "stdout", Path(env["TMPDIR"]) / "stderr"
    with out_path.open("wb") as out, err_path.open("wb") as err:
        proc = subprocess.Popen(argv, stdout=out, stderr=err, env=env)
        seen: dict[int, tuple[bytes, bytes]] = {}
        deadline = time.monotonic() + timeout
        while proc.poll() is None and time.monotonic() < deadline:
            for pid in descendants(proc.pid):
                try:
                    cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
                    environ = Path(f"/proc/{pid}/environ").read_bytes()
                except OSError:
                    continue
                old = seen.get(pid, (b"", b""))
                seen[pid] = (old[0] + b"\n" + cmdline, old[1] + b"\n" + environ)
            spawned = any(b"multiprocessing" in c for c, _ in seen.values())
            if spawned and until.encode() in err_path.read_bytes():
                proc.send_signal(signal.SIGTERM)
                break
            time.sleep(0.05)
        try:
            proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return proc.returncode, out_path.read_bytes(), err_path.read_bytes(), seen


@pytest.fixture
def keys(tmp_path):
    api, admin = f"sk-{secrets.token_hex(16)}", f"adm-{secrets.token_hex(16)}"
    return api, admin


def serve_env(tmp_path: Path) -> dict[str, str]:
    tmp = tmp_path / "tmp"
    tmp.mkdir(exist_ok=True)
    nvidia_smi = fake_nvidia_smi(tmp_path, "8x-rtx-pro-6000.csv")
    return {**os.environ, "TMPDIR": str(tmp), "SGLANG_EAGLE3_NVIDIA_SMI": nvidia_smi, "PYTHONPATH": str(PACKAGE_ROOT)}


def settings_file(tmp_path: Path, tree: Path, **extra) -> Path:
    model = tmp_path / "tiny-llama"
    model.mkdir()
    (model / "config.json").write_text(json.dumps(TINY_LLAMA))
    settings = {
        "model_path": str(model), "tp_size": 1, "port": free_port(), "attention_backend": "torch_native",
        "enable_torch_symm_mem": False, "enable_flashinfer_allreduce_fusion": False, "ready_timeout": 120,
        "stop_timeout": 5,
        "extra_args": ["--device", "cpu", "--load-format", "dummy", "--skip-tokenizer-init"],
        # The server process imports the SGLang tree under test, the sgl_kernel stand-in and this package.
        "environment": {"PYTHONPATH": os.pathsep.join([str(tree), str(STAND_INS), str(PACKAGE_ROOT)])},
        **extra,
    }  # fmt: skip
    path = tmp_path / "server.json"
    path.write_text(json.dumps(settings))
    return path


@pytest.mark.parametrize("source", ["settings", "systemd credentials"])
def test_real_launch_keeps_the_keys_out_of_every_output(tmp_path, patched_tree, keys, source):
    api, admin = keys
    env = serve_env(tmp_path)
    if source == "settings":
        extra = {"api_key_file": str(private_file(tmp_path / "api.key", api + "\n")),
                 "admin_api_key_file": str(private_file(tmp_path / "admin.key", admin))}  # fmt: skip
    else:  # as systemd's LoadCredential=api-key:... and admin-api-key:... deliver them
        credentials = tmp_path / "credentials"
        credentials.mkdir()
        private_file(credentials / "api-key", api)
        private_file(credentials / "admin-api-key", admin + "\n")
        env["CREDENTIALS_DIRECTORY"] = str(credentials)
        extra = {}
    config = settings_file(tmp_path, patched_tree, **extra)
    cli = [sys.executable, "-m", "sglang_eagle3.cli"]

    outputs = []
    for args in (["serve", "--dry-run"], ["serve", "--dry-run", "--json"], ["settings", "show"]):
        result = subprocess.run([*cli, *args, "--config", str(config), "--sglang", str(patched_tree)]
                                if args[0] == "serve" else [*cli, *args, "--config", str(config)],
                                capture_output=True, env=env, timeout=120)  # fmt: skip
        outputs += [result.stdout, result.stderr]
    assert b"sglang_eagle3.sglang_main" in outputs[0]  # the plan starts SGLang through our entry point

    code, out, err, processes = run_and_watch([*cli, "serve", "--config", str(config), "--sglang", str(patched_tree)],
                                              env, until="server_args=ServerArgs(")  # fmt: skip
    assert b"server_args=ServerArgs(" in err, err.decode()[-3000:]  # SGLang's own start-up line was reached
    assert any(b"sglang_eagle3.sglang_main" in c for c, _ in processes.values())
    assert any(b"multiprocessing" in c for c, _ in processes.values()), "no child of the server was seen"
    everything = b"\n".join([*outputs, out, err, *(c + e for c, e in processes.values())])
    for key in (api, admin):
        assert key.encode() not in everything
    assert b"api_key=" not in err  # the repr leaves the fields out altogether (patch 0005)
    assert code in (0, 4), err.decode()[-3000:]  # stopped by SIGTERM, or the server ended by itself


def test_the_same_launch_on_pristine_sglang_logs_the_key(tmp_path, pristine_tree, keys):
    """Without patch 0005 SGLang 0.5.9 prints the key in its first log lines: what the test above guards."""
    api, _ = keys
    env = serve_env(tmp_path)
    config = settings_file(tmp_path, pristine_tree, api_key_file=str(private_file(tmp_path / "api.key", api)))
    serve = [
        sys.executable,
        "-m",
        "sglang_eagle3.cli",
        "serve",
        "--config",
        str(config),
        "--sglang",
        str(pristine_tree),
    ]
    _, out, err, processes = run_and_watch(serve, env, until="server_args=ServerArgs(")
    line = next(x for x in err.splitlines() if b"server_args=ServerArgs(" in x)
    assert f"api_key='{api}'".encode() in line
    # Only there: the launcher kept it out of argv and the environment of every process.
    assert all(api.encode() not in c + e for c, e in processes.values())
