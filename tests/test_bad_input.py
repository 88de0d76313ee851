"""Bad input ends in a clear message and exit status 2 (bad input) or 1 (a check failed), never a traceback.

One test per finding of issue 10 (items 6-14); tests/test_fuzz_cli.py goes beyond them.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import REPO, snapshot
from sglang_eagle3 import stacks
from sglang_eagle3.bench import report
from sglang_eagle3.exit_status import ExitStatus
from sglang_eagle3.trees import patchset
from support.bench_fixtures import FAKE_SGLANG, fake_server, free_port
from support.gpus import fake_nvidia_smi
from support.own_resources import missing_path, refused_port


def clean(result) -> str:
    """stdout + stderr, after checking there is no traceback in them."""
    text = result.stdout + result.stderr
    assert "Traceback" not in text and "unexpected" not in text, text
    return text


def other_layout(tmp_path: Path, version: str) -> Path:
    """An SGLang tree of another layout: sglang/srt exists, srt/speculative/spec_info.py does not."""
    root = tmp_path / "other"
    (root / "sglang" / "srt").mkdir(parents=True)
    (root / "sglang" / "_version.py").write_text(f"__version__ = version = '{version}'\n")
    (root / "sglang" / "srt" / "server_args.py").write_text("class ServerArgs:\n    pass\n")
    return root


# -- 6: an SGLang tree of another layout ---------------------------------------------------------


def test_probe_on_another_layout(tmp_path, run_cli):
    result = run_cli("probe", "--sglang", str(other_layout(tmp_path, "0.6.1")))
    assert result.returncode == ExitStatus.BAD_INPUT
    text = clean(result)
    assert f"does not have the source layout of {stacks.listed()}" in text and "spec_info.py" in text
    assert "pip install sglang==0.5.9" in text


def test_dry_run_on_another_layout_warns_about_the_version(tmp_path, run_cli):
    result = run_cli("serve", "--dry-run", "--sglang", str(other_layout(tmp_path, "0.6.1")))
    assert result.returncode == ExitStatus.CHECK_FAILED
    text = clean(result)
    assert f"[WARN] sglang: {stacks.not_a_stack('0.6.1')}; read at" in text  # reachable now
    assert "[FAIL] probe:" in text and f"source layout of {stacks.listed()}" in text


# -- the SGLang preflight judged and the one the command runs -----------------------------------------


def test_the_dry_run_says_when_its_command_runs_another_sglang_than_preflight_judged(run_cli, newest_tree, tmp_path,
                                                                                    release_cache):  # fmt: skip
    """`serve --dry-run --sglang T` judged T but printed a command that runs whatever its Python imports, without
    a word. Now it says so (and which one runs); with T on the command's PYTHONPATH it runs T and says nothing."""
    env = {"SGLANG_EAGLE3_NVIDIA_SMI": fake_nvidia_smi(tmp_path, "8x-rtx-pro-6000.csv")}
    judged = newest_tree / "sglang"
    text = clean(run_cli("serve", "--dry-run", "--sglang", str(newest_tree), env=env))
    (note,) = [line for line in text.splitlines() if line.startswith("note:")]
    assert f"preflight judged SGLang 0.5.23 at {judged}, but the command runs " in note
    data = json.loads(run_cli("serve", "--dry-run", "--json", "--sglang", str(newest_tree), env=env).stdout)
    assert data["sglang"]["judged"] == str(judged) and data["sglang"]["runs"] != str(judged)
    assert data["sglang"]["note"] == note.removeprefix("note:").strip()

    on_path = json.dumps({"PYTHONPATH": str(newest_tree)})  # the settings' environment reaches the command
    runs_it = run_cli("serve", "--dry-run", "--json", "--sglang", str(newest_tree), "--set", f"environment={on_path}",
                      env=env)  # fmt: skip
    assert json.loads(runs_it.stdout)["sglang"] == {"judged": str(judged), "runs": str(judged), "note": None}

    stand_in = json.dumps({"PYTHONPATH": str(FAKE_SGLANG)})
    other = json.loads(run_cli("serve", "--dry-run", "--json", "--sglang", str(newest_tree), "--set",
                               f"environment={stand_in}", env=env).stdout)  # fmt: skip
    assert other["sglang"]["runs"] == str(FAKE_SGLANG / "sglang")
    assert f"the sglang at {FAKE_SGLANG / 'sglang'}" in other["sglang"]["note"]

    release = clean(run_cli("serve", "--dry-run", "--sglang", "0.5.9", env={**env, **release_cache}))
    assert "note:    preflight judged the pristine SGLang 0.5.9 release (sglang-0.5.9-py3-none-any.whl" in release
    assert "[FAIL] probe:" in release and "patch apply --sglang DIR, DIR being the SGLang 0.5.9 you serve" in release


# -- 7: the model's config.json ------------------------------------------------------------------


@pytest.mark.parametrize(
    "content, message",
    [
        (b"[]", "must hold a JSON object, not a JSON list"),
        (b"{not json", "is not valid JSON"),
        (b'{"architectures": "oops"}', "architectures must be a non-empty list of class names"),
        (b'{"architectures": []}', "architectures must be a non-empty list of class names"),
        (b"{}", "has no architectures; is this a model config.json?"),
        (b'{"architectures": ["\xff"]}', "is not UTF-8 text"),
    ],
)
def test_bad_config_json_fails_the_model_check(tmp_path, run_cli, patched_tree, content, message):
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_bytes(content)
    result = run_cli("serve", "--dry-run", "--sglang", str(patched_tree), "--profile", "baseline",
                     "--set", f"model_path={model}")  # fmt: skip
    assert result.returncode == ExitStatus.CHECK_FAILED
    assert f"[FAIL] model: {model / 'config.json'}" in clean(result) and message in result.stdout
    assert "no class o" not in result.stdout


# -- 8: probe --arch and --compute-capability -------------------------------------------------------


def test_unknown_architecture_is_bad_input_not_a_missing_patch(run_cli, pristine_tree):
    result = run_cli("probe", "--sglang", str(pristine_tree), "--arch", "NoSuchArch")
    assert result.returncode == ExitStatus.BAD_INPUT
    text = clean(result)
    assert "no class NoSuchArch" in text and "patch apply" not in text


@pytest.mark.parametrize("capability", ["99.9", "0.0", "12", "12.0.1", "sm120", "-9.0", "nan"])
def test_compute_capability_must_be_a_real_one(run_cli, pristine_tree, capability):
    result = run_cli("probe", "--sglang", str(pristine_tree), "--compute-capability", capability)
    assert result.returncode == ExitStatus.BAD_INPUT
    text = clean(result)
    assert "compute capability" in text and "KeyError" not in text


# -- 9: bench URLs ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "url, message",
    [
        ("http://127.0.0.1:99999", "not a valid URL"),
        ("http://[::1", "not a valid URL"),
        (":abc", "not an http(s) URL"),
        ("http://127.0.0.1:abc", "not a valid URL"),
        ("ftp://127.0.0.1:30000", "not an http(s) URL"),
        ("http://", "not an http(s) URL"),
        ("http://127.0.0.1:30000/v1/chat", "base URL only"),
        ("http://127.0.0.1:0", "port 0"),
    ],
)
def test_bad_urls(tmp_path, run_cli, url, message):
    result = run_cli("bench", "run", "--url", url, "--output", str(tmp_path / "r.jsonl"))
    assert result.returncode == ExitStatus.BAD_INPUT
    assert message in clean(result)
    assert not (tmp_path / "r.jsonl").exists()


@pytest.mark.parametrize(
    "url",
    [
        "http://user:s3cret@127.0.0.1:30000",  # refused for its user: the message still hides the password
        "http://user:s3cret@127.0.0.1:99999",  # refused for its port
        "user:s3cret@127.0.0.1:30000",  # no scheme
        "ftp://user:s3cret@127.0.0.1:30000",
        "http://127.0.0.1:30000/v1?api_key=s3cret",
        "http://u:p@ss:s3cret@127.0.0.1:30000",  # an unescaped @ in the password
        " http://user:s3cret@127.0.0.1:30000",  # a space before it
        "http://user:s3/cret@127.0.0.1:30000",  # a / in the password: Python's error quotes part of it
        "http://user:s3\uff03cret@127.0.0.1:30000",  # a character NFKC changes: Python's error quotes the netloc
        "http://user:s3?cret@127.0.0.1:30000",
        "http://127.0.0.1:30000/#token=s3cret",
    ],
)
def test_a_url_with_a_credential_is_refused_without_showing_it(tmp_path, run_cli, url):
    result = run_cli("bench", "run", "--url", url, "--output", str(tmp_path / "r.jsonl"))
    assert result.returncode == ExitStatus.BAD_INPUT
    assert "s3" not in result.stdout + result.stderr and "***" in clean(result)
    # bench compare takes a URL or a results file: any scheme://, in any case, is a URL, never a file name
    result = run_cli("bench", "compare", url.upper().replace("S3", "s3"), str(tmp_path / "candidate.jsonl"))
    assert result.returncode == ExitStatus.BAD_INPUT
    assert "s3" not in result.stdout + result.stderr and "***" in clean(result)


# -- 10: compare --threshold / --floor ----------------------------------------------------------------


def results_file(path: Path, label: str, rates: list[float]) -> Path:
    lines = [{"type": "run", "label": label}]
    lines += [{"type": "request", "label": label, "concurrency": 1, "ok": True, "decode_tok_s": r,
               "chunk_times_us": [100000, 110000], "chunk_tokens": [1, 1]} for r in rates]  # fmt: skip
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return path


@pytest.mark.parametrize(
    "option, value", [("--threshold", "nan"), ("--threshold", "-1"), ("--threshold", "0"), ("--threshold", "inf"),
                      ("--floor", "-5"), ("--floor", "nan"), ("--threshold", "fast")],
)  # fmt: skip
def test_compare_rejects_impossible_thresholds(tmp_path, run_cli, option, value):
    base = results_file(tmp_path / "b.jsonl", "baseline", [92.0])
    slow = results_file(tmp_path / "e.jsonl", "eagle3", [54.0])
    result = run_cli("bench", "compare", str(base), str(slow), option, value)
    assert result.returncode == ExitStatus.BAD_INPUT
    assert "PASS" not in clean(result) and f"Invalid value for '{option}'" in result.stderr


# -- 11: non-UTF-8 files, incomplete records --------------------------------------------------------


def test_non_utf8_settings_file(tmp_path, run_cli):
    config = tmp_path / "server.json"
    config.write_bytes(b'{"tp_size": 4, "host": "\xff"}')
    result = run_cli("settings", "show", "--config", str(config))
    assert result.returncode == ExitStatus.BAD_INPUT and "is not UTF-8 text" in clean(result)


@pytest.mark.parametrize(
    "lines, message",
    [
        ([b"\xff\xfe not text"], "not UTF-8 text"),
        ([b'{"type": "run"}', b'{"type": "request", "concurrency": 1, "ok": true}'], "label: Field required"),
        ([b'{"type": "run"}', b'{"type": "request", "label": "x", "concurrency": "one", "ok": true}'],
         "concurrency: Input should be a valid integer"),
        ([b'{"type": "run"}', b'{"type": "request", "label": "x", "concurrency": 1, "ok": true, '
          b'"chunk_times_us": [1, 2], "chunk_tokens": [1]}'], "differ in length"),
        ([b'{"type": "run"}', b'{"type": "request", "label": "x", "concurrency": 1, "ok": true, '
          b'"decode_tok_s": NaN}'], "finite number"),
        ([b'{"type": "nonsense"}'], "not a valid result record"),
    ],
)  # fmt: skip
def test_bad_results_files(tmp_path, run_cli, lines, message):
    results = tmp_path / "r.jsonl"
    results.write_bytes(b"\n".join(lines) + b"\n\n")
    for command in (["bench", "summary", str(results)], ["bench", "compare", str(results), str(results)]):
        result = run_cli(*command)
        assert result.returncode == ExitStatus.BAD_INPUT
        assert message in clean(result)


# -- 12: --set values ----------------------------------------------------------------------------------


def test_set_values_keep_their_type(run_cli):
    result = run_cli("settings", "show", "--set", "tp_size=true")
    assert result.returncode == ExitStatus.BAD_INPUT and "tp_size: Input should be a valid integer" in clean(result)
    result = run_cli("settings", "show", "--set", "served_model_name=1234", "--set", "mem_fraction_static=0.9")
    assert result.returncode == ExitStatus.OK, result.stderr
    shown = json.loads(result.stdout)
    assert shown["served_model_name"] == "1234" and shown["mem_fraction_static"] == 0.9


# -- 13: patch apply on a read-only tree; killed and interrupted applies ---------------------------------


def read_only(path: Path) -> list[str]:
    """A command prefix that runs with `path` mounted read-only (a private mount namespace)."""
    if shutil.which("unshare") is None:
        pytest.skip("needs unshare(1) to mount a tree read-only")
    probe = subprocess.run(["unshare", "-m", "true"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip(f"cannot make a mount namespace here: {probe.stderr.decode().strip()}")
    script = f'mount --bind "{path}" "{path}" && mount -o remount,bind,ro "{path}" && exec "$@"'
    return ["unshare", "-m", "sh", "-c", script, "sh"]


def test_apply_on_a_read_only_tree(pristine_tree, tree_copy, run_cli):
    tree = tree_copy(pristine_tree)
    before = snapshot(tree)
    result = subprocess.run([*read_only(tree), sys.executable, "-m", "sglang_eagle3.cli", "patch", "apply",
                             "--sglang", str(tree)], capture_output=True, text=True)  # fmt: skip
    assert result.returncode == ExitStatus.BAD_INPUT, result.stderr
    assert "cannot write to" in clean(result) and "nothing was changed" in result.stderr
    assert snapshot(tree) == before


def slow_patch(tmp_path: Path) -> dict[str, str]:
    """PATH with a `patch` that waits 3 s before patching the staging copy (verify's dry runs go at full speed): time
    to signal an apply midway."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    wrapper = bin_dir / "patch"
    wrapper.write_text(f'#!/bin/sh\ncase "$*" in *{patchset.STAGING_PREFIX}*) sleep 3;; esac\n'
                       f'exec {shutil.which("patch")} "$@"\n')  # fmt: skip
    wrapper.chmod(0o755)
    return {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}


def staging_dirs(tree: Path) -> list[Path]:
    return list(tree.glob(".sglang-eagle3-staging-*"))


def start_apply(tree: Path, env: dict[str, str]) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-m", "sglang_eagle3.cli", "patch", "apply", "--sglang", str(tree)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)  # fmt: skip
    deadline = time.monotonic() + 120
    while not staging_dirs(tree):  # the apply is past verify, staging
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.05)
    return proc


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_interrupted_apply_leaves_the_tree_and_no_staging_directory(tmp_path, pristine_tree, tree_copy, sig):
    tree = tree_copy(pristine_tree)
    before = snapshot(tree)
    proc = start_apply(tree, slow_patch(tmp_path))
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == (ExitStatus.TERMINATED if sig == signal.SIGTERM else ExitStatus.INTERRUPTED), err
    assert f"interrupted by {signal.Signals(sig).name}; the tree was left unchanged" in err
    assert staging_dirs(tree) == [] and snapshot(tree) == before


def test_a_killed_applys_staging_directory_is_removed_by_the_next_run(tmp_path, pristine_tree, tree_copy, run_cli):
    tree = tree_copy(pristine_tree)
    proc = start_apply(tree, slow_patch(tmp_path))
    proc.kill()  # SIGKILL: no clean-up possible
    proc.communicate()
    assert len(staging_dirs(tree)) == 1  # what issue 10 found in site-packages
    result = run_cli("patch", "apply", "--sglang", str(tree))
    assert result.returncode == ExitStatus.OK, result.stderr
    assert staging_dirs(tree) == []


# -- 14: bench sweep --concurrency-sweep --------------------------------------------------------------


def test_sweep_honours_the_concurrency_sweep(tmp_path, patched_tree):
    environment = json.dumps({"PYTHONPATH": str(FAKE_SGLANG), "FAKE_SGLANG_RATE": "400",
                              "FAKE_SGLANG_FIRST_DELAY": "0.01"})  # fmt: skip
    out = tmp_path / "sweep"
    env = {**os.environ, "SGLANG_EAGLE3_NVIDIA_SMI": fake_nvidia_smi(tmp_path, "8x-rtx-pro-6000.csv")}
    result = subprocess.run(
        [sys.executable, "-m", "sglang_eagle3.cli", "bench", "sweep", "--sglang", str(patched_tree),
         "--set", f"environment={environment}", "--set", f"port={free_port()}", "--set", "ready_timeout=30",
         "--steps", "3", "--topk", "1", "--concurrency-sweep", "--requests", "1", "--warmup", "0",
         "--max-tokens", "8", "--no-plot", "--output-dir", str(out)],
        capture_output=True, text=True, env=env, timeout=600,
    )  # fmt: skip
    assert result.returncode == ExitStatus.OK, result.stdout + result.stderr
    levels: dict[str, set[int]] = {}
    for r in report.load(out / "sweep.jsonl"):
        if r["type"] == "request":
            levels.setdefault(r["label"], set()).add(r["concurrency"])
    assert levels == {"baseline": {1, 2, 4, 8, 16}, "steps3-topk1-draft4": {1, 2, 4, 8, 16}}


def test_bench_run_output_that_cannot_be_written(tmp_path, run_cli):
    with fake_server(RATE=200) as server:
        for output in (tmp_path, tmp_path / "file" / "below-a-file.jsonl"):
            (tmp_path / "file").write_text("")
            result = run_cli("bench", "run", "--url", server.url, "--output", str(output), "--requests", "1")
            assert result.returncode == ExitStatus.BAD_INPUT
            clean(result)


# -- issue 36 (6): environment names, refused the same way by every command -----------------------------------


@pytest.mark.parametrize("name", ["A=B", "", "1ST", "A B", "\x1b[31m"])
@pytest.mark.parametrize("command", [["settings", "show"], ["serve", "--dry-run"], ["serve", "--dry-run", "--json"]])
def test_an_environment_variable_name_that_cannot_be_one_is_refused_by_every_command(run_cli, command, name):
    result = run_cli(*command, "--set", "environment=" + json.dumps({name: "secret-value-4711"}))
    assert result.returncode == ExitStatus.BAD_INPUT, result.stdout + result.stderr
    text = clean(result)
    assert "is not an environment variable name; use letters, digits and _" in result.stderr
    assert "secret-value-4711" not in text and "env: =" not in text and "\x1b" not in text


# -- issue 36 (7): statuses --------------------------------------------------------------------------------


def test_a_repo_id_too_long_for_the_hub_is_bad_input_shown_once_and_short(run_cli, tmp_path):
    spec = "owner/" + "a" * 5000
    result = run_cli("models", "lock", spec, "--output", str(tmp_path / "x.lock.json"))
    assert result.returncode == ExitStatus.BAD_INPUT
    text = clean(result)
    assert "expected REPO[@REVISION]" in text and "at most 96 characters" in text
    assert "a" * 100 not in text and len(text) < 600 and not (tmp_path / "x.lock.json").exists()


def test_a_missing_api_key_file_is_bad_input_in_serve_and_bench_alike(run_cli, tmp_path):
    missing = tmp_path / "no-such.key"
    serve = run_cli("serve", "--dry-run", "--set", f"api_key_file={missing}")
    with refused_port() as port:
        bench = run_cli("bench", "run", "--url", f"http://127.0.0.1:{port}", "--api-key-file", str(missing),
                        "--output", str(tmp_path / "r.jsonl"))  # fmt: skip
    for result in (serve, bench):
        assert result.returncode == ExitStatus.BAD_INPUT, result.stdout + result.stderr
        assert f"{missing} does not exist; write the key into that file" in clean(result)


def program(*args: str) -> list[str]:
    """The installed program's way in (`sglang-eagle3` runs sglang_eagle3.__main__)."""
    return [sys.executable, "-m", "sglang_eagle3", *args]


@pytest.mark.parametrize(
    "sig, status", [(signal.SIGINT, ExitStatus.INTERRUPTED), (signal.SIGTERM, ExitStatus.TERMINATED)]
)
def test_a_signal_while_the_commands_load_is_one_line_and_its_status(sig, status, tmp_path):
    """`timeout -s TERM 0.2 sglang-eagle3 patch apply` ended silently with 143, a Ctrl-C in the first quarter second
    printed a KeyboardInterrupt traceback from the imports. Now: one line, 128 + the signal."""
    proc = subprocess.Popen(program("patch", "apply", "--sglang", str(missing_path(tmp_path))), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)  # fmt: skip
    deadline = time.monotonic() + 60
    while not catches_sigterm(proc.pid):  # the program has begun: its first lines answer signals
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.005)
    proc.send_signal(sig)  # the commands take a few hundred milliseconds to load: the signal comes meanwhile
    _, err = proc.communicate(timeout=60)
    # Nothing done yet: it ends by the signal itself (systemd counts that a clean stop), which a shell shows as
    # 128 + the signal: the status.
    assert proc.returncode == -sig and 128 + sig == status, err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert err.startswith("Error: ") and signal.Signals(sig).name in err and "while starting" in err


def catches_sigterm(pid: int) -> bool:
    """Whether the process has a handler for SIGTERM (its SigCgt mask in /proc)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    mask = next((line.split()[1] for line in status.splitlines() if line.startswith("SigCgt:")), "0")
    return bool(int(mask, 16) & (1 << (signal.SIGTERM - 1)))


def test_serve_stopped_by_sigterm_before_its_server_started_exits_0(tmp_path):
    """systemd stops the unit with SIGTERM, and counts any status but 0 (or death by the signal) as a failure:
    during serve's preflight, as once the server runs, SIGTERM ends it with 0."""
    started = tmp_path / "nvidia-smi-started"
    slow = tmp_path / "nvidia-smi"
    slow.write_text(f"#!/bin/sh\ntouch {started}\nexec sleep 60\n")
    slow.chmod(0o755)
    proc = subprocess.Popen(program("serve"), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "SGLANG_EAGLE3_NVIDIA_SMI": str(slow)})  # fmt: skip
    deadline = time.monotonic() + 60
    while not started.exists():  # preflight is asking for the GPUs
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == ExitStatus.OK, err
    assert "stopped by SIGTERM before the server started; nothing was started" in err and "Traceback" not in err


def test_sigterm_during_a_command_is_one_line_and_143(tmp_path):
    """SIGTERM while a command works (here `bench run` against a server that never answers): one line, 143."""
    import socket

    with socket.socket() as silent:  # accepts connections, never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        url = f"http://127.0.0.1:{silent.getsockname()[1]}"
        proc = subprocess.Popen(program("bench", "run", "--url", url, "--output", str(tmp_path / "r.jsonl"),
                                        "--requests", "1", "--warmup", "0", "--no-plot"),
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
        silent.settimeout(60)
        connection, _ = silent.accept()  # the run has started: it asks the server what it serves
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
        connection.close()
    assert proc.returncode == ExitStatus.TERMINATED == 143, err
    assert "Traceback" not in err and "SIGTERM" in err


APPLY_THEN_SIGINT = """
import os, signal, sys
import click
from sglang_eagle3 import cli

echo = click.echo
def echo_after_a_signal(*args, **kwargs):  # Ctrl-C as the finished apply reports what it did
    os.kill(os.getpid(), signal.SIGINT)
    echo(*args, **kwargs)
click.echo = echo_after_a_signal
sys.argv = ["sglang-eagle3", "patch", "apply", "--sglang", sys.argv[1]]
cli.main()
"""


def test_a_signal_after_apply_has_finished_does_not_undo_its_status(pristine_tree, tree_copy):
    tree = tree_copy(pristine_tree)
    result = subprocess.run([sys.executable, "-c", APPLY_THEN_SIGINT, str(tree)], capture_output=True, text=True)
    assert result.returncode == ExitStatus.OK, result.stderr
    assert "now carries the whole patch set" in clean(result)
    verify = subprocess.run(program("patch", "verify", "--sglang", str(tree)), capture_output=True, text=True)
    assert verify.returncode == ExitStatus.OK, verify.stdout + verify.stderr


CTRL_C_IN_A_SCHEMA_BUILD = """
import os, signal, sys
from typing import Literal
import click, pydantic
from sglang_eagle3.cli_common import TopLevelGroup

class Value:  # a literal value whose repr is where Ctrl-C comes: at the call counted in argv[1]
    calls = 0
    def __repr__(self):
        Value.calls += 1
        if Value.calls == int(sys.argv[1]):
            os.kill(os.getpid(), signal.SIGINT)
        return "value"

@click.group(cls=TopLevelGroup)
def main():
    pass

@main.command()
def build():
    value = Value()
    try:
        pydantic.create_model("M", field=(Literal[value], value))
    except Exception as err:  # what pydantic-core made of the KeyboardInterrupt, for the test to see
        print(f"wrapped: {type(err).__name__}", file=sys.stderr)
        raise
    click.echo("built")

main(["build"], restore_signals=False)
"""


def test_ctrl_c_that_a_library_reports_as_its_own_error_is_still_an_interruption():
    """pydantic-core builds a model's validators in Rust and reports a KeyboardInterrupt raised in Python code it
    calls as a SchemaError ("Error building 'literal' validator: KeyboardInterrupt"): a Ctrl-C while `settings show`
    built the settings model ended with "unexpected SchemaError" and exit 70 (seen once in the test above). A signal
    the command was sent is the outcome, whatever exception it became: one line and 130, at every call it can hit."""
    wrapped = 0
    for call in range(1, 9):
        result = subprocess.run([sys.executable, "-c", CTRL_C_IN_A_SCHEMA_BUILD, str(call)], capture_output=True,
                                text=True, timeout=60)  # fmt: skip
        said = [line for line in result.stderr.splitlines() if not line.startswith("wrapped: ")]
        if result.returncode == ExitStatus.OK:
            assert result.stdout == "built\n" and said == [], (call, result.stderr)
            continue
        assert result.returncode == ExitStatus.INTERRUPTED, (call, result.stderr)
        assert said == ["Error: interrupted by Ctrl-C (SIGINT)"], (call, result.stderr)
        wrapped += "wrapped: SchemaError" in result.stderr
    assert wrapped, "no Ctrl-C came while pydantic-core built the model: the test measured nothing"


def test_the_hub_clients_debug_log_has_no_tracebacks(capfd):
    """HF_DEBUG=1 makes huggingface_hub log at DEBUG; a record carrying an exception printed its traceback among the
    models commands' output. It is one line now; the client's other debug lines are left as they are."""
    import logging

    from sglang_eagle3.models import hub

    hub._quiet_client()
    log = logging.getLogger("huggingface_hub.file_download")
    try:
        raise ConnectionError("refused")
    except ConnectionError:
        log.warning("while requesting HEAD http://hub/x", exc_info=True)
    log.warning("Retrying in 1s [Retry 1/5].")
    err = capfd.readouterr().err
    assert "Traceback" not in err
    assert "while requesting HEAD http://hub/x: ConnectionError: refused\nRetrying in 1s [Retry 1/5].\n" in err


def test_the_hub_clients_log_goes_to_each_commands_stderr_even_once_the_last_one_is_closed(monkeypatch, tmp_path):
    """A second command in one process (click's CliRunner, a program using the package) ended with 'unexpected
    ValueError: I/O operation on closed file' once the first command's stderr was closed: the client's log handler
    flushed it as it was pointed at the new one."""
    import logging

    from huggingface_hub.utils import logging as hub_logging
    from sglang_eagle3.models import hub

    hub_logging.get_logger()  # the client's own handler, as the commands find it
    first, second = open(tmp_path / "first", "w"), open(tmp_path / "second", "w")  # noqa: SIM115
    try:
        monkeypatch.setattr(sys, "stderr", first)
        hub._quiet_client()
        first.close()
        monkeypatch.setattr(sys, "stderr", second)
        hub._quiet_client()
        logging.getLogger("huggingface_hub.file_download").warning("Retrying in 1s [Retry 1/5].")
        second.close()
        assert (tmp_path / "second").read_text() == "Retrying in 1s [Retry 1/5].\n"
    finally:
        monkeypatch.undo()
        hub._quiet_client()  # back to this process's stderr


# -- issue 36 (9): silences ----------------------------------------------------------------------------------


def test_a_tls_key_password_file_on_0_5_9_fails_the_dry_run(run_cli, patched_tree, tmp_path):
    """0.5.9 has no --ssl-keyfile-password: it refused the file only at launch, after a dry run that said OK."""
    password = tmp_path / "password"
    password.write_text("pw")
    password.chmod(0o600)
    env = {"SGLANG_EAGLE3_NVIDIA_SMI": fake_nvidia_smi(tmp_path, "8x-rtx-pro-6000.csv")}
    result = run_cli("serve", "--dry-run", "--sglang", str(patched_tree), "--set",
                     f"ssl_keyfile_password_file={password}", env=env)  # fmt: skip
    assert result.returncode == ExitStatus.CHECK_FAILED
    (line,) = [x for x in clean(result).splitlines() if x.startswith("[FAIL] settings:")]
    assert "ssl_keyfile_password_file: SGLang 0.5.9 has no flag --ssl-keyfile-password" in line


def test_patch_check_takes_one_format(run_cli, tmp_path):
    result = run_cli("patch", "check", "--sglang", str(missing_path(tmp_path)), "--json", "--markdown")
    assert result.returncode == ExitStatus.BAD_INPUT
    assert "--json and --markdown are two formats of one report: give one of them" in clean(result)


def test_a_sweep_names_a_draft_directory_that_is_not_there(run_cli, tmp_path):
    draft = missing_path(tmp_path, "draft")
    result = run_cli("bench", "sweep", "--draft", str(draft), "--output-dir", str(tmp_path / "out"))
    assert result.returncode == ExitStatus.BAD_INPUT
    assert "never-created/draft' is no directory" in clean(result) and "--draft" in result.stderr  # (shortened)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "args, message",
    [
        (["models", "verify", "--lock", "x", "--dir", "y", "--progress-interval", "nan"], "not a finite number"),
        (["models", "verify", "--lock", "x", "--dir", "y", "--progress-interval", "0.01"], "must be >= 0.1"),
        (["bench", "sweep", "--steps", "1,,2"], "expected comma-separated integers"),
        (["bench", "sweep", "--steps", "3", "--topk", "1,"], "expected comma-separated integers"),
    ],
)
def test_numbers_and_lists_out_of_their_range_are_refused(run_cli, tmp_path, args, message):
    result = run_cli(*args, "--output-dir", str(tmp_path / "out")) if args[0] == "bench" else run_cli(*args)
    assert result.returncode == ExitStatus.BAD_INPUT
    assert message in clean(result)


@pytest.mark.parametrize(
    "name, content, message",
    [
        ("s.json", '{"tp_size": 4, "tp_size": 8}', "setting 'tp_size' is given twice; keep one (TOML refuses it too)"),
        ("s.yaml", "tp_size: 4\n", "YAML is not read; write it as JSON or TOML"),
        ("s.yml", "tp_size: 4\n", "YAML is not read"),
        ("s.conf", "tp_size = 4\n", "the file name's extension picks the format: .toml is read as TOML"),
    ],
)
def test_settings_files_say_what_their_format_is(run_cli, tmp_path, name, content, message):
    (tmp_path / name).write_text(content)
    result = run_cli("settings", "show", "--config", str(tmp_path / name))
    assert result.returncode == ExitStatus.BAD_INPUT
    assert message in clean(result)


@pytest.mark.parametrize(
    "name, content",
    [
        ("s.json", "\ufeff" + '{"tp_size": 4}'),  # the byte-order mark some Windows editors write
        ("s.toml", "\ufeff" + "tp_size = 4\n"),
        ("S.TOML", "tp_size = 4\n"),  # the extension's case does not matter, as for .YAML
    ],
)
def test_settings_files_a_user_may_well_have_are_read(run_cli, tmp_path, name, content):
    (tmp_path / name).write_text(content, encoding="utf-8")
    result = run_cli("settings", "show", "--config", str(tmp_path / name))
    assert result.returncode == ExitStatus.OK, result.stderr
    assert json.loads(result.stdout)["tp_size"] == 4


def test_bench_ab_names_its_own_option(run_cli, tmp_path):
    for option in ("--a-set", "--b-set"):
        result = run_cli("bench", "ab", "--a", "true", "--b", "true", option, "foo",
                         "--output-dir", str(tmp_path / "ab"))  # fmt: skip
        assert result.returncode == ExitStatus.BAD_INPUT
        assert f"{option} expects field=value, e.g. {option} tp_size=4" in clean(result)
        assert "--set expects" not in result.stderr


@pytest.mark.parametrize(
    "args",
    [
        ["probe", "--sglang", "{missing}", "--json"],
        ["patch", "verify", "--sglang", "{missing}", "--json"],
        ["patch", "check", "--sglang", "{missing}", "--json"],
        ["serve", "--dry-run", "--json", "--set", "tp_size=0"],
        ["models", "verify", "--lock", "{missing}.lock.json", "--dir", "{missing}", "--json"],
        # click's usage errors (issue 36): a bad option, a missing value, a bad value, before or after --json
        ["probe", "--json", "--bogus"],
        ["serve", "--dry-run", "--json", "--set"],
        ["patch", "verify", "--json", "--sglang"],
        ["models", "verify", "--json", "--lock", "x.lock.json"],
        ["patch", "check", "--sglang", "{missing}", "--json", "--markdown"],
        ["settings", "show", "--bogus"],
    ],
)
def test_under_json_every_command_fails_as_one_json_object(run_cli, args, tmp_path):
    result = run_cli(*[a.replace("{missing}", str(missing_path(tmp_path))) for a in args])
    assert result.returncode == ExitStatus.BAD_INPUT
    clean(result)
    if "--json" not in args:
        assert result.stdout == "" and "Error: " in result.stderr  # no --json: the error on stderr only
        return
    data = json.loads(result.stdout)  # one object, nothing else on stdout
    assert data["ok"] is False and data["error"]["kind"] and data["error"]["message"].strip()
    assert data["error"]["message"] in result.stderr or data["error"]["message"].split(":")[0] in result.stderr
    if "Usage: " in result.stderr:  # click's usage error: its kind is the status it exits with
        assert data["error"]["kind"] == "bad_input"


def test_commands_that_fail_early_leave_no_result_directories(run_cli, tmp_path):
    sweep = run_cli("bench", "sweep", "--set", "tp_size=0", "--output-dir", str(tmp_path / "sweep"))
    assert sweep.returncode == ExitStatus.BAD_INPUT
    missing = str(missing_path(tmp_path))
    preflight = run_cli("bench", "sweep", "--sglang", missing, "--output-dir", str(tmp_path / "sweep"),
                        env={"SGLANG_EAGLE3_NVIDIA_SMI": missing})  # fmt: skip
    assert preflight.returncode != ExitStatus.OK
    assert not (tmp_path / "sweep").exists()


def test_compare_measuring_an_unreachable_server_leaves_no_results_directory(tmp_path):
    with refused_port() as port:
        url = f"http://127.0.0.1:{port}"
        result = subprocess.run(program("bench", "compare", url, url), cwd=tmp_path, capture_output=True, text=True)
    assert result.returncode == ExitStatus.CHECK_FAILED and "Traceback" not in result.stderr
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "args",
    [
        ["settings", "show", "--set", "port=" + "9" * 100_000],
        ["settings", "show", "--set", "host=x", "--set", "port=" + "x" * 100_000],
        ["settings", "show", "--set", "port=\x1b[31mred\x07"],
        ["settings", "show", "--set", "no_such_\x1b[2J=1"],
        ["bench", "run", "--url", "http://" + "a" * 100_000],
        ["bench", "run", "--url", "http://\x1b[31mhost\x1b[0m:99999"],
        ["probe", "--sglang", "{missing}", "--compute-capability", "1" * 100_000],
        ["models", "lock", "\x1b[31m/x", "--output", "{missing}/x.json"],
        ["probe", "--sglang", "x" * 100_000],  # paths too: as they are unless long or not printable
        ["probe", "--sglang", "/a\x1b[31mb\x07c"],
        ["settings", "show", "--config", "{missing}/a\x07b.json"],
        ["serve", "--dry-run", "--set", "model_path=" + "x" * 100_000],
        ["models", "verify", "--lock", "{missing}/a\x07b", "--dir", "{missing}"],
    ],
)
def test_values_are_shown_short_and_escaped(run_cli, args, tmp_path):
    result = run_cli(*[a.replace("{missing}", str(missing_path(tmp_path))) for a in args])
    assert result.returncode == ExitStatus.BAD_INPUT, result.stderr[:2000]
    text = clean(result)
    assert len(text) < 3000 and "\x1b" not in text and "\x07" not in text, text[:3000]


def test_the_dry_run_shows_control_characters_escaped(run_cli, tmp_path):
    env = {"SGLANG_EAGLE3_NVIDIA_SMI": fake_nvidia_smi(tmp_path, "8x-rtx-pro-6000.csv")}
    missing = missing_path(tmp_path)
    result = run_cli("serve", "--dry-run", "--set", f"model_path={missing}/a\x07b", "--set",
                     "served_model_name=x\x07y", env=env)  # fmt: skip
    assert result.returncode == ExitStatus.CHECK_FAILED
    text = clean(result)
    assert "\x07" not in text and "missing/a\\x07b" in text and "x\\x07y" in text


def test_the_dry_run_shortens_a_long_value_as_messages_do(run_cli, tmp_path):
    """A 100,000-character value is shown by its start and end (issue 36), in the command line and the
    environment alike; --json keeps the argv exactly."""
    env = {"SGLANG_EAGLE3_NVIDIA_SMI": fake_nvidia_smi(tmp_path, "8x-rtx-pro-6000.csv")}
    long = "y" * 50_000 + "\x07" + "z" * 50_000
    given = ("--set", f"served_model_name={long}", "--set", "environment=" + json.dumps({"LONG": long}))
    result = run_cli("serve", "--dry-run", *given, env=env)
    text = clean(result)
    assert "y" * 100 not in text and "\x07" not in text and len(text) < 20_000, text[:3000]
    (command,) = [line for line in text.splitlines() if line.startswith("command: ")]
    assert "--served-model-name " + "y" * 38 + "..." + "z" * 39 + " " in command
    assert "env:     LONG=" + "y" * 38 + "..." + "z" * 39 in text
    exact = json.loads(run_cli("serve", "--dry-run", "--json", *given, env=env).stdout)
    assert exact["argv"][exact["argv"].index("--served-model-name") + 1] == long


# -- issue 36 (8): hints that agree with what the commands do -------------------------------------------------


def test_patch_apply_without_sglang_does_not_suggest_a_version(run_cli):
    result = run_cli("patch", "apply")
    assert result.returncode == ExitStatus.BAD_INPUT
    text = clean(result)
    assert "nothing to patch; give the directory of the SGLang you serve with --sglang DIR" in text
    assert "patch apply --sglang 0.5.9" not in text and "(e.g. --sglang 0.5.9" not in text


def test_verify_on_a_conflict_does_not_suggest_apply_alone(run_cli, pristine_tree, tree_copy):
    tree = tree_copy(pristine_tree)
    first = patchset.PatchSeries.for_version("0.5.9").patches[0]
    (tree / first.files[0]).write_text("# edited by hand\n")
    result = run_cli("patch", "verify", "--sglang", str(tree))
    assert result.returncode == ExitStatus.CHECK_FAILED
    text = clean(result)
    assert f"{first.name} conflicts with the files of" in result.stderr and "would refuse the tree" in text
    assert "pip install --force-reinstall --no-deps sglang==0.5.9" in text and "Not all patches" not in text


def test_a_damaged_cached_tree_is_told_to_clear_the_cache(run_cli, tmp_path, pristine_wheel, release_cache):
    tree = tmp_path / "xdg" / "sglang-eagle3" / "sglang" / "trees" / pristine_wheel.name.removesuffix(".whl")
    run_cli("probe", "--sglang", "0.5.9", env=release_cache)  # unpacked into the cache
    (tree / "sglang" / "srt" / "speculative" / "spec_info.py").unlink()
    result = run_cli("probe", "--sglang", "0.5.9", env=release_cache)
    assert result.returncode == ExitStatus.BAD_INPUT
    text = clean(result)
    assert f"does not have the source layout of {stacks.listed()}" in text and f"rm -r {tree}" in text
    assert "pip install sglang==0.5.9" not in text


def test_another_release_is_told_which_versions_there_are(tmp_path, run_cli):
    wheel = tmp_path / "sglang-0.4.0-py3-none-any.whl"
    import zipfile

    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr("sglang/_version.py", "__version__ = version = '0.4.0'\n")
        archive.writestr("sglang/srt/server_args.py", "class ServerArgs:\n    pass\n")
    result = run_cli("probe", "--sglang", str(wheel), env={"XDG_CACHE_HOME": str(tmp_path / "xdg")})
    assert result.returncode == ExitStatus.BAD_INPUT
    text = clean(result)
    assert stacks.not_a_stack("0.4.0") in text and "pip install" not in text


def test_a_draft_to_download_is_told_a_command_that_exists(run_cli, patched_tree):
    result = run_cli("probe", "--sglang", str(patched_tree), "--draft", "some-org/some-draft", "--set",
                     "model_path=nvidia/Kimi-K2.5-NVFP4")  # fmt: skip
    text = clean(result)
    assert "huggingface-cli" not in text
    assert "hf download some-org/some-draft --local-dir DIR" in text and "sglang-eagle3 models fetch" in text


# -- issue 36 (10): what a first run on a laptop is doing -------------------------------------------------------


def test_a_first_read_of_a_release_says_what_it_unpacks_once(run_cli, release_cache):
    first = run_cli("probe", "--sglang", "0.5.9", env=release_cache)
    assert "sglang-eagle3: unpacking sglang-0.5.9-py3-none-any.whl into " in first.stderr and "(once)" in first.stderr
    again = run_cli("probe", "--sglang", "0.5.9", env=release_cache)
    assert "unpacking" not in again.stderr and again.returncode == first.returncode == ExitStatus.CHECK_FAILED


def test_patch_check_says_what_it_checks_before_it_reads(pristine_tree, monkeypatch):
    from click.testing import CliRunner
    from sglang_eagle3 import cli
    from sglang_eagle3.commands import patch
    from sglang_eagle3.errors import CheckFailed

    def reading(series, tree):
        raise CheckFailed("stopped where the reading starts")

    monkeypatch.setattr(patch.patch_check, "check", reading)
    result = CliRunner().invoke(cli.main, ["patch", "check", "--sglang", str(pristine_tree)])
    assert result.exit_code == ExitStatus.CHECK_FAILED
    line = result.stderr.splitlines()[0]
    assert line.startswith("checking the ") and "patches of " in line
    assert f"against SGLang 0.5.9 at {pristine_tree / 'sglang'} ..." in line


# -- issue 46 (4): exit statuses and signals ----------------------------------------------------------------------


def blocked_writing(argv: list[str], env: dict | None = None) -> tuple[subprocess.Popen, int]:
    """Start ``argv`` with stdout a full pipe (one page, already written): its first write to stdout blocks, which
    is where a command that has done its work prints its report. Returns the process and the pipe's read end, once
    it is blocked there."""
    read, write = os.pipe()
    fcntl.fcntl(write, fcntl.F_SETPIPE_SZ, 4096)
    os.write(write, b"x" * 4096)
    proc = subprocess.Popen(argv, stdout=write, stderr=subprocess.PIPE, text=True, env=env)
    os.close(write)
    deadline = time.monotonic() + 120
    while "pipe_write" not in Path(f"/proc/{proc.pid}/wchan").read_text():
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.02)
    return proc, read


def drained(proc: subprocess.Popen, read: int) -> tuple[bytes, str]:
    out = b""
    while chunk := os.read(read, 1 << 16):
        out += chunk
    os.close(read)
    return out[4096:], proc.communicate(timeout=60)[1]


@pytest.mark.parametrize("what", ["patch apply", "settings show", "settings schema", "patch list"])
def test_a_signal_once_the_work_is_done_changes_nothing(what, pristine_tree, tree_copy, tmp_path):
    """`patch apply` exited 130 or 143 after the whole series was applied (5 of 25 timed runs), `settings show`
    likewise. Here the signals come exactly then: the work done, the command blocked printing its report. Both
    Ctrl-C and SIGTERM change nothing: the report comes out whole and the status is 0."""
    argv = {"patch apply": ["patch", "apply", "--sglang", str(tree_copy(pristine_tree))],
            "settings show": ["settings", "show", "--set", "served_model_name=" + "m" * 70_000],
            "settings schema": ["settings", "schema"], "patch list": ["patch", "list"]}[what]  # fmt: skip
    proc, read = blocked_writing(program(*argv))
    proc.send_signal(signal.SIGINT)
    proc.send_signal(signal.SIGTERM)
    time.sleep(0.3)  # the signals delivered while it waits to write
    out, err = drained(proc, read)
    assert proc.returncode == ExitStatus.OK, err
    assert "Traceback" not in err and "interrupted" not in err and "terminated" not in err
    if what == "patch apply":
        assert out.decode().rstrip().endswith("now carries the whole patch set.")
        assert run_patch_verify(argv[-1]).returncode == ExitStatus.OK
    elif what == "settings show":
        assert json.loads(out)["served_model_name"] == "m" * 70_000


def run_patch_verify(tree: str) -> subprocess.CompletedProcess:
    return subprocess.run(program("patch", "verify", "--sglang", tree), capture_output=True, text=True)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_at_any_moment_of_the_start_is_one_line_or_nothing(sig, tmp_path):
    """A signal in the first tens of milliseconds gave a KeyboardInterrupt traceback or "Fatal Python error". From
    the program's first line on (it catches SIGTERM from then: /proc's SigCgt; before it is the interpreter's own
    start-up), at every moment: one line and 128 + the signal, or the command's own outcome; never a traceback."""
    outcomes = set()
    for delay_ms in (0, 1, 2, 4, 7, 10, 15, 20, 30, 45, 60, 90, 130, 200, 300):
        proc = subprocess.Popen(program("settings", "show", "--config", str(tmp_path / "missing.json")),
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
        deadline = time.monotonic() + 60
        while not catches_sigterm(proc.pid):
            if proc.poll() is not None:
                break
            assert time.monotonic() < deadline
            time.sleep(0.001)
        time.sleep(delay_ms / 1000)
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(sig)
        _, err = proc.communicate(timeout=60)
        assert "Traceback" not in err and "Fatal Python error" not in err and "Aborted" not in err, (delay_ms, err)
        if proc.returncode in (-sig, 128 + sig):
            assert len(err.strip().splitlines()) == 1 and signal.Signals(sig).name in err, (delay_ms, err)
        else:  # it had read the settings file before: its own outcome, bad input
            assert proc.returncode == ExitStatus.BAD_INPUT and "cannot read settings file" in err, (delay_ms, err)
        outcomes.add(proc.returncode)
    assert outcomes & {-sig, 128 + sig}, "no signal came before the command had ended: the test measured nothing"


@pytest.mark.parametrize("argv", [["patch", "list"], ["settings", "schema"], ["--help"], ["patch", "--help"]])
def test_a_reader_that_goes_away_ends_the_command_quietly(argv):
    """`sglang-eagle3 patch list | head -1` exited 2 with "Broken pipe; check the path and its permissions". It ends
    quietly, as other programs do, with the status a shell gives one SIGPIPE ended (141)."""
    shell = f"set -o pipefail; {shlex.join(program(*argv))} | head -c 10 >/dev/null"
    result = subprocess.run(["bash", "-c", shell], capture_output=True, text=True)
    assert result.returncode in (ExitStatus.OK, ExitStatus.BROKEN_PIPE), result.stderr  # 0: it wrote all in time
    assert result.stderr == "", result.stderr
    big = subprocess.run(["bash", "-c", f"set -o pipefail; {shlex.join(program(*argv))} | head -c 1 >/dev/null; "
                          "exit ${PIPESTATUS[0]}"], capture_output=True, text=True)  # fmt: skip
    assert big.stderr == "" and big.returncode in (ExitStatus.OK, ExitStatus.BROKEN_PIPE)
    slow = subprocess.run(["bash", "-c", f"{shlex.join(program(*argv))} | (sleep 0; exec true); "
                           "exit ${PIPESTATUS[0]}"], capture_output=True, text=True)  # fmt: skip
    assert slow.stderr == "" and slow.returncode in (ExitStatus.OK, ExitStatus.BROKEN_PIPE)


def test_patch_list_into_a_closed_pipe_is_141():
    read, write = os.pipe()
    os.close(read)  # the reader is gone before the first line
    proc = subprocess.run(program("patch", "list"), stdout=write, stderr=subprocess.PIPE, text=True)
    os.close(write)
    assert proc.returncode == ExitStatus.BROKEN_PIPE == 141 and proc.stderr == "", proc.stderr


@pytest.mark.parametrize("value, shows", [("0", False), ("", False), ("no", False), ("1", True), ("true", True)])
def test_the_traceback_variable_means_what_it_says(monkeypatch, value, shows):
    """SGLANG_EAGLE3_TRACEBACK=0 printed a traceback (any value did)."""
    from click.testing import CliRunner
    from sglang_eagle3 import cli
    from sglang_eagle3.serving import settings as server_settings

    monkeypatch.setattr(server_settings, "json_schema", lambda: 1 / 0)
    result = CliRunner(env={"SGLANG_EAGLE3_TRACEBACK": value}).invoke(cli.main, ["settings", "schema"])
    if shows:
        assert isinstance(result.exception, ZeroDivisionError)
    else:
        assert result.exit_code == ExitStatus.UNEXPECTED and "unexpected ZeroDivisionError" in result.output
        assert "Traceback" not in result.output


def deep_json(path: Path, levels: int = 100_000) -> Path:
    path.write_text("[" * levels + "]" * levels)
    return path


@pytest.mark.parametrize("args", [["settings", "show", "--config", "{json}"],
                                  ["settings", "show", "--config", "{toml}"], ["bench", "summary", "{json}"],
                                  ["bench", "compare", "{json}", "{json}"],
                                  ["models", "verify", "--lock", "{json}", "--dir", "{dir}"],
                                  ["models", "fetch", "--lock", "{json}", "--dir", "{dir}"]])  # fmt: skip
def test_deeply_nested_inputs_are_bad_input(run_cli, tmp_path, args):
    """Deeply nested JSON exited 70 (RecursionError); it is bad input, said as any malformed file is."""
    toml = tmp_path / "deep.toml"
    toml.write_text("a = " + "[" * 100_000 + "]" * 100_000)
    given = {"json": str(deep_json(tmp_path / "deep.json")), "toml": str(toml), "dir": str(tmp_path / "model")}
    result = run_cli(*[a.format(**given) for a in args])
    assert result.returncode == ExitStatus.BAD_INPUT, result.stderr[-2000:]
    assert "Traceback" not in clean(result) and len(result.stderr) < 2000


def without_gnu_patch(tmp_path: Path) -> dict[str, str]:
    """PATH with everything the commands need but GNU patch (python is called by its full path)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("sh", "bash", "env", "cat"):
        if found := shutil.which(tool):
            (bin_dir / tool).symlink_to(found)
    return {**os.environ, "PATH": str(bin_dir)}


def test_the_same_failure_has_the_same_status_in_every_command(tmp_path, pristine_tree, tree_copy):
    """Without GNU patch, check and apply exited 1 but verify 2; an unreachable server exited 2 in bench but 1 in
    models. A program the host lacks and a server that does not answer are failed checks (1) in every command."""
    tree = str(tree_copy(pristine_tree))
    env = without_gnu_patch(tmp_path)
    for argv in (["patch", "check", "--sglang", tree], ["patch", "apply", "--sglang", tree],
                 ["patch", "verify", "--sglang", tree]):  # fmt: skip
        result = subprocess.run(program(*argv), capture_output=True, text=True, env=env)
        assert result.returncode == ExitStatus.CHECK_FAILED, (argv, result.stderr[-1500:])
        assert "GNU patch is not installed" in result.stderr and "Traceback" not in result.stderr
    with refused_port() as port:
        url = f"http://127.0.0.1:{port}"
        hub = {**os.environ, "HF_ENDPOINT": url, "HF_HUB_OFFLINE": "0"}
        lock = REPO / "nix" / "tests" / "example-draft.lock.json"
        for argv, env, said in (
            (["bench", "run", "--url", url, "--output", str(tmp_path / "r.jsonl")], None, f"cannot reach {url}"),
            (["bench", "compare", url, url], None, f"cannot reach {url}"),
            (["models", "lock", "example/tiny", "-o", str(tmp_path / "x.lock.json")], hub, "cannot reach the hub"),
            (["models", "fetch", "--lock", str(lock), "--dir", str(tmp_path / "m")], hub, "cannot reach the hub"),
        ):
            result = subprocess.run(program(*argv), capture_output=True, text=True, env=env, cwd=tmp_path)
            assert result.returncode == ExitStatus.CHECK_FAILED, (argv, result.stderr[-1500:])
            assert said in result.stderr and "Traceback" not in result.stderr


# -- issue 46 (5): bad input accepted or misread ------------------------------------------------------------------


def test_an_empty_path_never_means_the_working_directory(run_cli, tmp_path):
    """`models verify --dir ''`, `models lock -o ''` and kubernetes/generate.py's `--output ''` read or wrote the
    working directory (the checkout). tests/test_fuzz_cli.py gives '' to every path option there is."""
    lock = str(REPO / "nix" / "tests" / "example-draft.lock.json")
    for argv in (["models", "verify", "--lock", lock, "--dir", ""], ["models", "lock", "example/tiny", "-o", ""],
                 ["models", "fetch", "--lock", lock, "--dir", " "], ["probe", "--sglang", ""],
                 ["bench", "compare", "", lock]):  # fmt: skip
        result = subprocess.run(program(*argv), capture_output=True, text=True, cwd=tmp_path)
        assert result.returncode == ExitStatus.BAD_INPUT and "is empty" in result.stderr, (argv, result.stderr)
        assert list(tmp_path.iterdir()) == []
    generate = subprocess.run([sys.executable, str(REPO / "kubernetes" / "generate.py"), "--output", ""],
                              capture_output=True, text=True, cwd=tmp_path)  # fmt: skip
    assert generate.returncode == 2 and "argument --output: is empty" in generate.stderr
    assert list(tmp_path.iterdir()) == []


def test_generate_refuses_a_bad_lock_or_output_and_checks_the_directory_it_names(tmp_path):
    """kubernetes/generate.py gave tracebacks for a bad --target-lock or an --output that is a file, and --check
    named kubernetes/ whatever --output was."""
    generate = [sys.executable, str(REPO / "kubernetes" / "generate.py")]
    (tmp_path / "file").write_text("")
    (tmp_path / "bad.lock.json").write_text('{"repo": 1}')
    for args, said in ((["--target-lock", str(tmp_path / "bad.lock.json")], "--target-lock: lock file"),
                       (["--draft-lock", str(tmp_path / "missing.json")], "--draft-lock: cannot read lock file"),
                       (["--output", str(tmp_path / "file")], "is not a directory"),
                       (["--output", str(tmp_path / "file" / "below")], "cannot write"),
                       (["--target-lock", str(deep_json(tmp_path / "deep.json"))], "nested too deeply")):  # fmt: skip
        result = subprocess.run([*generate, *args, "--output", str(tmp_path / "out")] if "--output" not in args
                                else [*generate, *args], capture_output=True, text=True)  # fmt: skip
        assert result.returncode == 2 and said in result.stderr, (args, result.stderr[-1500:])
        assert "Traceback" not in result.stderr
    elsewhere = tmp_path / "manifests"
    check = subprocess.run([*generate, "--check", "--output", str(elsewhere)], capture_output=True, text=True)
    assert check.returncode == 1 and f"{elsewhere}/base/" in check.stdout and "kubernetes/base" not in check.stdout
    assert subprocess.run([*generate, "--output", str(elsewhere)], capture_output=True).returncode == 0
    assert subprocess.run([*generate, "--check", "--output", str(elsewhere)], capture_output=True).returncode == 0


def test_preflights_models_lock_hint_is_a_command_that_runs(run_cli, tmp_path):
    """Preflight's `sglang-eagle3 models lock nvidia/Kimi-K2.5-NVFP4` lacked the -o it requires. Every command a
    finding quotes parses with the CLI's own definitions."""
    import re

    import click
    from sglang_eagle3 import cli

    env = {"SGLANG_EAGLE3_NVIDIA_SMI": fake_nvidia_smi(tmp_path, "8x-rtx-pro-6000.csv")}
    result = run_cli("serve", "--dry-run", "--set", "revision=main", env=env)  # hub ids: a branch, and no revision
    quoted = re.findall(r"`(sglang-eagle3 [^`]+)`", result.stdout)
    assert any(" models lock " in q for q in quoted), result.stdout
    for command in quoted:
        found, words = cli.main, shlex.split(command)[1:]
        while isinstance(found, click.Group):
            found = found.get_command(click.Context(found), words.pop(0))
        found.make_context(found.name, words)  # click.UsageError for a missing option (--output) or a bad value
        assert found.name in ("lock", "fetch"), command
