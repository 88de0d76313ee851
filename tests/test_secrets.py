"""The API keys never show: not in any output, argv, environment or log, SGLang's own included.

The main test runs the real launch path: `sglang-eagle3 serve` (preflight, launch plan,
launcher) starts `python -m sglang_eagle3.serving.sglang_main` on SGLang 0.5.9 unpacked from the
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
from conftest import STAND_INS
from sglang_eagle3.exit_status import ExitStatus
from support.bench_fixtures import fake_server, free_port
from support.gpus import fake_nvidia_smi
from support.processes import descendants

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
    assert b"sglang_eagle3.serving.sglang_main" in outputs[0]  # the plan starts SGLang through our entry point

    code, out, err, processes = run_and_watch([*cli, "serve", "--config", str(config), "--sglang", str(patched_tree)],
                                              env, until="server_args=ServerArgs(")  # fmt: skip
    assert b"server_args=ServerArgs(" in err, err.decode()[-3000:]  # SGLang's own start-up line was reached
    assert any(b"sglang_eagle3.serving.sglang_main" in c for c, _ in processes.values())
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


# -- patch 0005 on its own: the pristine and the patched tree, side by side -------------------------

SERVER_ARGS_DRIVER = """
import ast, dataclasses, json, pathlib, sys
import sglang
from sglang.srt.server_args import ServerArgs
ServerArgs.__post_init__ = lambda self: None  # it probes for an accelerator; not what is under test
args = ServerArgs(model_path="m", api_key=sys.argv[1], admin_api_key=sys.argv[2])
srt = pathlib.Path(sglang.__file__).parent / "srt"
published = []  # calls that turn the whole server args into a dict: asdict(server_args), vars(...)
for path in srt.rglob("*.py"):
    for node in ast.walk(ast.parse(path.read_bytes())):
        if isinstance(node, ast.Call) and ast.unparse(node.func) in ("dataclasses.asdict", "asdict", "vars"):
            if node.args and "server_args" in ast.unparse(node.args[0]):
                published.append(f"{path.relative_to(srt)}:{node.lineno}")
public = args.public_dict() if hasattr(args, "public_dict") else None
print(json.dumps({"repr": repr(args), "public": public, "published": published}))
"""


def server_args_facts(tree: Path, api: str, admin: str) -> dict:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tree), str(STAND_INS)])}
    result = subprocess.run([sys.executable, "-c", SERVER_ARGS_DRIVER, api, admin], capture_output=True, text=True,
                            env=env, timeout=300)  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.splitlines()[-1])


def test_patch_0005_hides_the_keys_from_repr_and_the_info_endpoints(pristine_tree, patched_tree, keys):
    api, admin = keys
    pristine = server_args_facts(pristine_tree, api, admin)
    assert api in pristine["repr"] and admin in pristine["repr"]  # what SGLang 0.5.9 logs
    assert len(pristine["published"]) >= 4  # /server_info, Engine, gRPC, /set_internal_state
    patched = server_args_facts(patched_tree, api, admin)
    assert api not in patched["repr"] and admin not in patched["repr"]
    assert "model_path='m'" in patched["repr"]  # the rest is still logged
    assert patched["published"] == []  # every info endpoint goes through public_dict()
    assert "api_key" not in patched["public"] and "admin_api_key" not in patched["public"]
    assert patched["public"]["model_path"] == "m"


# -- key files, in preflight and in bench -----------------------------------------------------------


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda p: p.write_text(""), "is empty; write the key into it"),
        (lambda p: p.write_text("  \n"), "is empty"),
        (lambda p: (p.write_text("k-1"), p.chmod(0o644)), "chmod 600"),
        (lambda p: (p.write_text("k-1"), p.chmod(0o640)), "chmod 600"),
        (lambda p: p.mkdir(), "is a directory"),
        (lambda p: None, "does not exist"),
        (lambda p: p.write_text("k-1\nk-2\n"), "on one line"),
        (lambda p: p.write_text("k 1"), "without spaces"),
        (lambda p: p.write_bytes(b"k\xff"), "printable ASCII"),
    ],
    ids=["empty", "blank", "world-readable", "group-readable", "directory", "missing", "two-lines", "space",
         "binary"],
)  # fmt: skip
def test_preflight_rejects_unusable_key_files(tmp_path, run_cli, patched_tree, make, message):
    key = tmp_path / "api.key"
    make(key)
    if key.is_file() and message != "chmod 600":
        key.chmod(0o600)
    for setting in ("api_key_file", "admin_api_key_file"):
        result = run_cli("serve", "--dry-run", "--sglang", str(patched_tree), "--set", f"{setting}={key}")
        # A file the settings name that cannot be used is bad input, as a bad `bench run --api-key-file` is (issue 36)
        assert result.returncode == ExitStatus.BAD_INPUT, result.stdout + result.stderr
        line = next(x for x in result.stderr.splitlines() if str(key) in x)
        assert message in line and setting in line
        assert "k-1" not in result.stdout + result.stderr and "Traceback" not in result.stderr


@pytest.mark.skipif(os.getuid() == 0, reason="root reads every file: an unreadable key file needs another user")
def test_preflight_rejects_an_unreadable_key_file(tmp_path, run_cli, patched_tree):
    key = tmp_path / "api.key"
    key.write_text("k-1")
    key.chmod(0o000)
    result = run_cli("serve", "--dry-run", "--sglang", str(patched_tree), "--set", f"api_key_file={key}")
    assert result.returncode == ExitStatus.BAD_INPUT and "cannot be read by this user" in result.stderr


SECRET = "sk-do-not-print-4711"


@pytest.mark.parametrize(
    "args, env",
    [
        (["settings", "show", "--set", f"api_key={SECRET}"], {}),
        (["settings", "show", "--set", f"admin_api_key={SECRET}"], {}),
        (["serve", "--dry-run", "--set", f'extra_args=["--api-key", "{SECRET}"]'], {}),
        (["serve", "--dry-run", "--set", f'extra_args=["--admin-api-key={SECRET}"]'], {}),
        (["serve", "--dry-run", "--set", f'extra_args=["--api_key", "{SECRET}"]'], {}),
        (["serve", "--dry-run", "--set", f'extra_args=["--api-k", "{SECRET}"]'], {}),
        (["serve", "--dry-run", "--set", f"extra_args=--api-key {SECRET}"], {}),
        (["serve", "--dry-run", "--set", f"environment=HF_TOKEN={SECRET}"], {}),
        (["settings", "show", "--set", SECRET], {}),
        (["settings", "show", "--set", f"api-key={SECRET}"], {}),
        (["settings", "show"], {"SGLANG_EAGLE3_API_KEY": SECRET}),
        (["settings", "show"], {"SGLANG_EAGLE3_ADMIN_API_KEY": SECRET}),
        (["settings", "show", "--set", f'environment={{"HF_TOKEN": "{SECRET}"}}'], {}),
        (["serve", "--dry-run", "--set", f'environment={{"MY_SECRET": "{SECRET}"}}'], {}),
        (["serve", "--dry-run", "--json", "--set", f'environment={{"API_KEY": "{SECRET}"}}'], {}),
        (["serve", "--dry-run", "--set", f'extra_args=["--ssl-keyfile-password", "{SECRET}"]'], {}),
        (["serve", "--dry-run", "--set", f'extra_args=["--ssl-keyfile-pass={SECRET}"]'], {}),
        (["settings", "show", "--set", f"ssl_keyfile_password={SECRET}"], {}),
        (
            [
                "serve",
                "--dry-run",
                "--set",
                "extra_args=" + json.dumps(["--watermark-config", json.dumps({"key": SECRET})]),
            ],
            {},
        ),
        (["settings", "show", "--set", "extra_args=" + json.dumps([f'--watermark-config={{ "key": "{SECRET}"}}'])], {}),
    ],
)
def test_a_key_typed_in_the_wrong_place_is_never_echoed(run_cli, args, env):
    result = run_cli(*args, env=env)
    assert SECRET not in result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    if "environment={" not in " ".join(args):  # those are legal settings (shown masked); the rest are refused
        assert result.returncode == 2, result.stderr


def test_paths_next_to_secret_flags_are_no_secrets(run_cli):
    """--ssl-keyfile (a prefix of --ssl-keyfile-password) names the key file; --watermark-config takes a path."""
    for extra in (["--ssl-keyfile", "/etc/tls/key.pem"], ["--ssl-keyfile=/etc/tls/key.pem"],
                  ["--watermark-config", "/etc/sglang/watermark.json"]):  # fmt: skip
        result = run_cli("settings", "show", "--set", "extra_args=" + json.dumps(extra))
        assert result.returncode == 0, result.stderr
    refused = run_cli("settings", "show", "--set", 'extra_args=["--ssl-keyfile-password", "x"]')
    assert refused.returncode == 2 and "set ssl_keyfile_password_file" in refused.stderr
    inline = run_cli("settings", "show", "--set", "extra_args=" + json.dumps(["--watermark-config", '{"key": "x"}']))
    assert (
        inline.returncode == 2 and "give it the path of a file (chmod 600) holding the watermark JSON" in inline.stderr
    )


def test_a_key_in_the_settings_file_is_refused_without_echo(tmp_path, run_cli):
    for name, text in (("s.toml", f'api_key = "{SECRET}"\n'), ("s.json", json.dumps({"admin_api_key": SECRET}))):
        (tmp_path / name).write_text(text)
        result = run_cli("settings", "show", "--config", str(tmp_path / name))
        assert result.returncode == 2 and "put it in a file (chmod 600)" in result.stderr
        assert SECRET not in result.stdout + result.stderr


def test_bench_sends_the_key_and_keeps_it_out_of_the_results(tmp_path, run_cli, keys):
    api, _ = keys
    key = private_file(tmp_path / "api.key", api + "\n")
    wrong = private_file(tmp_path / "wrong.key", "sk-wrong")
    with fake_server(RATE=400, API_KEY_FILE=str(key)) as server:  # answers 401 without the key, as SGLang does
        base = ["bench", "run", "--url", server.url, "--requests", "2", "--warmup", "0", "--max-tokens", "16",
                "--no-plot"]  # fmt: skip
        result = run_cli(*base, "--output", str(tmp_path / "none.jsonl"))
        assert result.returncode == 2 and "requires an API key (HTTP 401): give --api-key-file" in result.stderr
        result = run_cli(*base, "--output", str(tmp_path / "wrong.jsonl"), "--api-key-file", str(wrong))
        assert result.returncode == 2 and "rejected the API key" in result.stderr
        result = run_cli(*base, "--output", str(tmp_path / "file.jsonl"), "--api-key-file", str(key))
        assert result.returncode == 0, result.stderr
        credentials = tmp_path / "credentials"
        credentials.mkdir()
        private_file(credentials / "api-key", api)
        result = run_cli(
            *base, "--output", str(tmp_path / "systemd.jsonl"), env={"CREDENTIALS_DIRECTORY": str(credentials)}
        )
        assert result.returncode == 0, result.stderr
    for name in ("file.jsonl", "systemd.jsonl"):
        text = (tmp_path / name).read_text()
        assert api not in text
        records = [json.loads(line) for line in text.splitlines()]
        assert sum(r["type"] == "request" and r["ok"] for r in records) == 2
        info = next(r for r in records if r["type"] == "server_info")
        assert "api_key" not in json.dumps(info["raw"])  # dropped, also from the internal states
        assert info["raw"]["fake_true_rate"] == 400  # the rest kept
    key.chmod(0o644)
    result = run_cli(*base, "--api-key-file", str(key), "--output", str(tmp_path / "x.jsonl"))
    assert result.returncode == 2 and f"chmod 600 {key}" in result.stderr and api not in result.stderr
