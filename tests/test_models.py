"""`sglang-eagle3 models lock/fetch/verify`: the real huggingface_hub client against a stand-in hub on loopback.

The stand-in (tests/stand_ins/fake_hub.py) serves a generated repository (LFS weights of some
MB, small git files); every command runs as a subprocess, as users run it.

The two stacks pin different huggingface_hub majors (tests/support/hub_clients.py): SGLang
0.5.9's 0.x (the test environment's), 0.5.23's 1.x, which raises httpx's exceptions instead of
requests' and does not resume a file across runs. The tests of what the client does (lock, fetch,
resume, the errors, the token) run under both (`@both_hubs`); the others under the environment's.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import random
import re
import secrets
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest
from conftest import CACHE
from sglang_eagle3.exit_status import ExitStatus
from sglang_eagle3.judging import preflight
from sglang_eagle3.models import fetch, lockfile
from sglang_eagle3.models.progress import human_bytes
from sglang_eagle3.serving import settings
from stand_ins.fake_hub import git_blob_id, is_lfs, lfs_pointer
from support import harness_env
from support.draft_fixtures import eagle3_draft_config, hub_cache_snapshot, write_draft
from support.hub_clients import HubClient, hub_client, stack_hubs
from support.models_fixtures import (
    REPO_ID,
    MiB,
    hub_with_model,
    locked_files_in,
    models_cmd,
    models_env,
    run_models,
    sample_files,
    sha256,
)  # fmt: skip
from support.own_resources import refused_port

HUBS = {pin["version"]: pin for pin in stack_hubs().values()}  # the stacks' hub clients, by version
both_hubs = pytest.mark.parametrize("client", sorted(HUBS), indirect=True, ids=lambda v: f"hub-{v}")


@pytest.fixture
def client(request) -> HubClient:
    """The hub client the CLI runs with: the test environment's, or a stack's (`@both_hubs`)."""
    version = getattr(request, "param", None) or importlib.metadata.version("huggingface_hub")
    if harness_env.get(harness_env.SGLANG_WHEEL) and version != importlib.metadata.version("huggingface_hub"):
        pytest.skip("the Nix check has no network to fetch the other stack's huggingface_hub")
    return hub_client(HUBS.get(version, {"version": version}), CACHE)


@pytest.fixture
def hub():
    with hub_with_model() as h:
        yield h


@pytest.fixture
def env(hub, tmp_path, client):
    return client.env(models_env(hub, tmp_path))


def cut_short(client: HubClient) -> str:
    """What a fetch cut short promises, by client (models/hub.py run_again)."""
    return "run the same command again to resume" if client.major == 0 else "a file cut short starts again"


def lock_model(env, tmp_path: Path, spec: str = REPO_ID) -> tuple[Path, dict]:
    lock_file = tmp_path / "model.lock.json"
    code, data, _, err = run_models(env, "lock", spec, "--output", str(lock_file))
    assert code == 0, err
    return lock_file, json.loads(lock_file.read_text())


def wait_paused_or_exit(hub, proc: subprocess.Popen, timeout: float = 120) -> bool:
    """True once the stand-in holds the download (the fetch is mid-transfer); False if the fetch ended."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if hub.paused.wait(0.05):
            return True
        if proc.poll() is not None:
            return False
    raise AssertionError("the fetch neither paused nor ended")


def sizes_under(directory: Path) -> dict[str, int]:
    """The files under directory and their sizes, now. The fetch being watched creates and removes
    files and folders meanwhile (its staging .cache/huggingface): os.walk skips a folder that
    vanished, where Path.rglob raised FileNotFoundError and failed the test on a busy machine."""
    sizes = {}
    for root, _dirs, files in os.walk(directory):
        for name in files:
            try:
                sizes[os.path.join(root, name)] = os.stat(os.path.join(root, name)).st_size
            except FileNotFoundError:
                continue
    return sizes


def test_sizes_under_skips_a_folder_removed_while_it_looks(tmp_path, monkeypatch):
    """The race of a busy machine, made certain: the fetch removes its staging folder between
    the listing of its parent and the look inside it."""
    (tmp_path / "kept").write_bytes(b"abc")
    (tmp_path / "stage" / "deep").mkdir(parents=True)
    (tmp_path / "stage" / "deep" / "part").write_bytes(b"x")
    real = os.scandir

    class Listing:  # what os.scandir returns: an iterator that is also a context manager
        def __init__(self, entries):
            self.entries = iter(entries)

        def __iter__(self):
            return self

        def __next__(self):
            return next(self.entries)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def close(self):
            pass

    def scandir(path="."):
        with real(path) as entries:
            listed = Listing(list(entries))
        if not isinstance(path, int) and Path(path) == tmp_path / "stage":
            shutil.rmtree(tmp_path / "stage" / "deep")
        return listed

    monkeypatch.setattr(os, "scandir", scandir)
    assert sizes_under(tmp_path) == {str(tmp_path / "kept"): 3}


def wait_quiet(directory: Path, polls: int = 3) -> None:
    """Until nothing under directory grows for a few polls: what arrived before the pause is written."""
    last, still = None, 0
    while still < polls:
        time.sleep(0.1)
        now = sizes_under(directory)
        still = still + 1 if now == last else 0
        last = now


# -- lock ----------------------------------------------------------------------------------------


@both_hubs
def test_lock_pins_the_commit_and_every_file_as_the_hub_publishes_it(hub, env, tmp_path):
    lock_file, lock = lock_model(env, tmp_path)
    files = sample_files()
    assert lock["repo"] == REPO_ID and lock["revision"] == "main"
    assert lock["commit"] == hub.repos[REPO_ID].refs["main"]
    assert [f["path"] for f in lock["files"]] == sorted(files)
    for f in lock["files"]:
        data = files[f["path"]]
        assert (f["size"], f["sha256"], f["lfs"]) == (len(data), sha256(data), is_lfs(f["path"])), f["path"]
        # LFS: the pointer's blob id, as the hub lists it; git files: the content's.
        assert f["git_blob_id"] == git_blob_id(lfs_pointer(data) if f["lfs"] else data), f["path"]
    assert lock["total_size"] == sum(map(len, files.values())) and lock["gated"] is False
    # Only the small git files were downloaded to hash them; the weights' sha256 came from the hub.
    downloaded = {
        r["path"].rsplit("/resolve/", 1)[1].split("/", 1)[1]
        for r in hub.requests(method="GET")
        if "/resolve/" in r["path"]
    }
    assert downloaded == {p for p in files if not is_lfs(p)}
    assert hub.requests(host=f"localhost:{hub.port}") == []


def test_lock_resolves_branches_tags_and_commits(hub, env, tmp_path):
    first = hub.repos[REPO_ID].refs["main"]
    hub.repos[REPO_ID].refs["v1.0"] = first
    second = hub.commit(REPO_ID, {**sample_files(), "config.json": b'{"changed": true}'})
    one = tmp_path / "one.lock.json"
    for spec, commit in ((f"{REPO_ID}@v1.0", first), (f"{REPO_ID}@{first}", first), (REPO_ID, second)):
        code, data, _, err = run_models(env, "lock", spec, "--output", str(one))
        assert code == 0 and data["locks"][0]["commit"] == commit, err
        assert json.loads(one.read_text())["commit"] == commit
    # Locking again when nothing changed upstream leaves the file as it was: no diff to review.
    before = one.read_text()
    time.sleep(1.1)  # locked_at has one-second resolution
    code, data, _, _ = run_models(env, "lock", REPO_ID, "--output", str(one))
    assert code == 0 and data["locks"][0]["changed"] is False and one.read_text() == before
    # Several repositories: a directory with one lock each; the same one twice is refused.
    hub.commit("test-org/other", {"config.json": b"{}"})
    code, data, _, _ = run_models(env, "lock", REPO_ID, "test-org/other", "--output", str(tmp_path / "locks"))
    assert code == 0 and sorted(p.name for p in (tmp_path / "locks").iterdir()) == [
        "test-org--other.lock.json", "test-org--tiny-eagle3.lock.json",
    ]  # fmt: skip
    code, data, _, _ = run_models(env, "lock", f"{REPO_ID}@v1.0", REPO_ID, "--output", str(tmp_path / "locks"))
    assert code == 2 and data["error"]["kind"] == "bad_input" and "given twice" in data["error"]["message"]


@both_hubs
def test_lock_of_an_unknown_revision_or_repository_fails_clearly(env, tmp_path):
    code, data, _, _ = run_models(env, "lock", f"{REPO_ID}@no-such-branch", "--output", str(tmp_path / "x.json"))
    assert code == 2 and data["error"]["kind"] == "revision_not_found"
    assert "no revision 'no-such-branch'" in data["error"]["message"]
    code, data, _, _ = run_models(env, "lock", "test-org/no-such-model", "--output", str(tmp_path / "x.json"))
    assert (
        code == 2 and data["error"]["kind"] == "repo_not_found" and "test-org/no-such-model" in data["error"]["message"]
    )
    code, data, _, _ = run_models(env, "lock", "not a repo id", "--output", str(tmp_path / "x.json"))
    assert code == 2 and data["error"]["kind"] == "bad_input" and "REPO[@REVISION]" in data["error"]["message"]
    assert not (tmp_path / "x.json").exists()


def test_a_repository_whose_file_names_escape_the_model_directory_is_not_locked(hub, env, tmp_path):
    hub.commit("test-org/odd", {"config.json": b"{}", ".sglang-eagle3/state.json": b"{}"})
    code, data, _, _ = run_models(env, "lock", "test-org/odd", "--output", str(tmp_path / "x.json"))
    assert code == 1 and data["error"]["kind"] == "hub_error" and "cannot be locked" in data["error"]["message"]
    assert ".sglang-eagle3/state.json" in data["error"]["message"] and not (tmp_path / "x.json").exists()


# -- fetch and verify ------------------------------------------------------------------------------


@both_hubs
def test_fetch_downloads_exactly_the_lock_and_verify_agrees(hub, env, tmp_path):
    lock_file, lock = lock_model(env, tmp_path)
    directory = tmp_path / "model"
    code, data, _, err = run_models(env, "fetch", "--lock", str(lock_file), "--dir", str(directory))
    assert code == 0, err
    assert data["downloaded"] == len(lock["files"]) and data["failed"] == 0 and data["extra"] == []
    assert data["downloaded_bytes"] == lock["total_size"]
    for path, content in sample_files().items():
        assert (directory / path).read_bytes() == content
    model_files = {p.relative_to(directory).as_posix() for p in directory.rglob("*") if p.is_file()}
    assert {p for p in model_files if not p.startswith(".sglang-eagle3/")} == set(sample_files())
    assert not any((directory / ".sglang-eagle3" / "staging").iterdir())  # nothing half-done is left
    # The token-less client never sent an Authorization header; LFS bytes came from the CDN host.
    assert all(r["authorization"] is None for r in hub.log)
    assert {r["path"] for r in hub.requests(host=f"localhost:{hub.port}")} == {
        f"/cdn/{f['sha256']}" for f in lock["files"] if f["lfs"]
    }

    code, data, _, err = run_models(env, "verify", "--lock", str(lock_file), "--dir", str(directory))
    assert code == 0 and data["ok"] and data["problems"] == [] and data["bytes_hashed"] == lock["total_size"]

    # A second fetch trusts what it verified and downloads nothing.
    before = len(hub.requests(method="GET"))
    code, data, _, _ = run_models(env, "fetch", "--lock", str(lock_file), "--dir", str(directory))
    assert code == 0 and data["present"] == len(lock["files"]) and data["downloaded"] == 0
    assert len(hub.requests(method="GET")) == before


@pytest.mark.parametrize(
    "seed, client", [*((7, v) for v in sorted(HUBS)), (2026, importlib.metadata.version("huggingface_hub"))],
    indirect=["client"],
    ids=lambda v: f"hub-{v}" if v in HUBS else None,
)  # fmt: skip
def test_fetch_killed_at_random_points_resumes_and_ends_verified(hub, env, tmp_path, seed, client):
    lock_file, lock = lock_model(env, tmp_path)
    directory = tmp_path / "model"
    rng = random.Random(seed)
    kills = 0
    for attempt in range(8):
        verified = sum(f["size"] for f in lock["files"] if locked_files_in(directory, lock).get(f["path"]))
        partial = sum(p.stat().st_size for p in directory.rglob("*.incomplete")) if directory.exists() else 0
        remaining = lock["total_size"] - verified - partial
        # The first kill comes after one 10 MiB write of the largest file (one download at a time):
        # the next run must resume it. The others fall anywhere in the first 70% of what is left.
        budget = (
            rng.randrange(11 * MiB, 20 * MiB)
            if attempt == 0
            else rng.randrange(MiB // 4, max(MiB // 2, int(remaining * 0.7)))
        )
        jobs = "1" if attempt == 0 else rng.choice(["1", "2", "8"])
        hub.pause_after(budget)
        proc = subprocess.Popen(
            models_cmd("fetch", "--lock", str(lock_file), "--dir", str(directory), "--jobs", jobs),
            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        if wait_paused_or_exit(hub, proc):
            wait_quiet(directory)
            proc.send_signal(signal.SIGKILL)
            kills += 1
        proc.wait(timeout=60)
        hub.release()
        # Whatever the kill point: no locked name holds a partial or wrong file.
        assert all(locked_files_in(directory, lock).values()), locked_files_in(directory, lock)
        if proc.returncode == 0 or kills == 4:
            break
    assert kills >= 3
    resumed = [r for r in hub.requests(method="GET") if r["range"] and not r["range"].startswith("bytes=0-")]
    if client.major == 0:
        assert resumed, "no download was resumed with a Range request"
    else:  # 1.x starts a file cut short again in the next run (models/hub.py resumes_partial_files)
        assert resumed == []
    code, data, _, err = run_models(env, "fetch", "--lock", str(lock_file), "--dir", str(directory))
    assert code == 0, err
    code, data, _, _ = run_models(env, "verify", "--lock", str(lock_file), "--dir", str(directory))
    assert code == 0 and data["ok"], data
    assert all(locked_files_in(directory, lock).values()) and len(locked_files_in(directory, lock)) == len(
        lock["files"]
    )


@both_hubs
def test_an_interrupted_download_is_reported_and_resumed_with_a_range_request(hub, env, tmp_path, client):
    lock_file, lock = lock_model(env, tmp_path)
    directory = tmp_path / "model"
    big = next(f for f in lock["files"] if f["path"] == "model-00001-of-00002.safetensors")
    cdn = f"/cdn/{big['sha256']}"
    hub.drop_lfs_after = 12 * MiB  # the CDN cannot serve past 12 MiB: the 23 MiB shard cannot finish
    code, data, _, _ = run_models(env, "fetch", "--lock", str(lock_file), "--dir", str(directory))
    assert code == 1 and not data["ok"]
    failed = {o["path"]: o["error"] for o in data["outcomes"] if o["status"] == "failed"}
    assert set(failed) == {"model-00001-of-00002.safetensors"}
    assert failed["model-00001-of-00002.safetensors"]["kind"] == "interrupted"
    assert cut_short(client) in failed["model-00001-of-00002.safetensors"]["message"]
    assert not (directory / "model-00001-of-00002.safetensors").exists()  # never reported complete
    # 0.x gives up at the first cut; 1.x resumes from its last 10 MiB write within the run, in vain.
    tries = [r["range"] for r in hub.requests(path=cdn) if r["range"]]
    assert tries == [] if client.major == 0 else len(tries) > 1 and set(tries) == {f"bytes={10 * MiB}-"}
    hub.drop_lfs_after = None
    asked = len(hub.requests(path=cdn))
    code, data, _, err = run_models(env, "fetch", "--lock", str(lock_file), "--dir", str(directory))
    assert code == 0 and data["downloaded"] == 1, err
    again = [r["range"] for r in hub.requests(path=cdn)[asked:]]
    if client.major == 0:  # only what was missing travelled again
        assert again == [f"bytes={10 * MiB}-"] and data["downloaded_bytes"] == big["size"] - 10 * MiB
    else:
        assert again == [None] and data["downloaded_bytes"] == big["size"]
    assert run_models(env, "verify", "--lock", str(lock_file), "--dir", str(directory))[0] == 0


@both_hubs
def test_sigterm_stops_a_fetch_at_once_and_the_rerun_completes(hub, env, tmp_path, client):
    lock_file, lock = lock_model(env, tmp_path)
    directory = tmp_path / "model"
    hub.pause_after(15 * MiB)  # one download at a time: the largest file has one 10 MiB write
    proc = subprocess.Popen(
        models_cmd("fetch", "--lock", str(lock_file), "--dir", str(directory), "--jobs", "1"),
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert wait_paused_or_exit(hub, proc)
    wait_quiet(directory)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)  # the downloads are blocked, yet the process ends
    hub.release()
    assert proc.returncode == ExitStatus.TERMINATED == 143  # 128 + SIGTERM, as for every command (issue 36)
    assert "stopped by SIGTERM" in err and cut_short(client) in err
    assert all(locked_files_in(directory, lock).values())
    partial = sum(p.stat().st_size for p in directory.rglob("*.incomplete"))
    missing = sum(f["size"] for f in lock["files"] if not locked_files_in(directory, lock).get(f["path"]))
    code, data, out, err = run_models(env, "fetch", "--lock", str(lock_file), "--dir", str(directory))
    assert code == 0, out + err
    # What the stopped fetch wrote is resumed (0.x) or, never reused by 1.x, not counted as done.
    assert partial > 0 and data["downloaded_bytes"] == missing - (partial if client.major == 0 else 0)
    assert run_models(env, "verify", "--lock", str(lock_file), "--dir", str(directory))[0] == 0


def test_a_second_fetch_into_the_same_directory_is_refused_while_the_first_runs(hub, env, tmp_path):
    lock_file, _ = lock_model(env, tmp_path)
    directory = tmp_path / "model"
    hub.pause_after(5 * MiB)
    first = subprocess.Popen(models_cmd("fetch", "--lock", str(lock_file), "--dir", str(directory)), env=env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    assert wait_paused_or_exit(hub, first)
    code, data, _, _ = run_models(env, "fetch", "--lock", str(lock_file), "--dir", str(directory))
    hub.release()
    assert code == 1 and data["error"]["kind"] == "busy" and str(directory) in data["error"]["message"]
    assert first.wait(timeout=120) == 0


@pytest.mark.parametrize("torn", [b"", b"f5c1fb2", b'f5c1fb20910fbaf7528b6a9b35a2934cff5edad9\n"etag"\n17'])
@pytest.mark.parametrize("path", ["model.safetensors.index.json", "model-00002-of-00002.safetensors"])
def test_a_fetch_killed_while_the_hub_client_wrote_its_metadata_is_resumed(hub, env, tmp_path, path, torn):
    """A fetch killed after huggingface_hub put a file in staging but while it wrote the file's
    metadata leaves that metadata torn; huggingface_hub 0.36 then fails with UnboundLocalError
    (huggingface/huggingface_hub#3609). Found by the SIGTERM test above under load; built here
    on purpose: the file in staging, its metadata cut short (empty, mid-line, no newline at end).
    """
    lock_file, lock = lock_model(env, tmp_path)
    directory = tmp_path / "model"
    entry = next(f for f in lockfile.load(lock_file).files if f.path == path)
    scratch = directory / fetch.STATE_DIR / "staging" / fetch.staging_key(entry)
    (scratch / path).parent.mkdir(parents=True)
    (scratch / path).write_bytes(sample_files()[path])
    metadata = scratch / ".cache" / "huggingface" / "download" / f"{path}.metadata"
    metadata.parent.mkdir(parents=True)
    metadata.write_bytes(torn)
    code, data, out, err = run_models(env, "fetch", "--lock", str(lock_file), "--dir", str(directory))
    assert code == 0, out + err
    assert all(locked_files_in(directory, lock).values()) and len(locked_files_in(directory, lock)) == 11


@pytest.fixture
def fetched(hub, env, tmp_path):
    lock_file, lock = lock_model(env, tmp_path)
    directory = tmp_path / "model"
    code, _, _, err = run_models(env, "fetch", "--lock", str(lock_file), "--dir", str(directory))
    assert code == 0, err
    return lock_file, lock, directory


def test_verify_names_a_flipped_byte_in_any_file(env, fetched):
    lock_file, lock, directory = fetched
    rng = random.Random(5)
    for f in lock["files"]:
        target = directory / f["path"]
        original = target.read_bytes()
        at = rng.randrange(len(original))
        target.write_bytes(original[:at] + bytes([original[at] ^ 0x01]) + original[at + 1 :])
        code, data, _, _ = run_models(env, "verify", "--lock", str(lock_file), "--dir", str(directory))
        assert code == 1 and not data["ok"], f["path"]
        assert [(p["path"], p["kind"]) for p in data["problems"]] == [(f["path"], "sha256")]
        # --quick compares sizes only: the same size passes, as documented.
        assert run_models(env, "verify", "--quick", "--lock", str(lock_file), "--dir", str(directory))[0] == 0
        target.write_bytes(original)
    result = subprocess.run(
        models_cmd("verify", "--lock", str(lock_file), "--dir", str(directory)), env=env, capture_output=True, text=True
    )
    assert result.returncode == 0 and result.stdout.startswith("OK: 11 files")


def test_verify_names_missing_extra_and_truncated_files(env, fetched):
    lock_file, lock, directory = fetched
    (directory / "config.json").unlink()
    (directory / "model-00003-of-00002.safetensors").write_bytes(b"stray shard")
    (directory / "original" / "notes.txt").write_text("mine")
    with open(directory / "tokenizer.model", "r+b") as f:
        f.truncate(1000)
    (directory / ".cache" / "huggingface").mkdir(parents=True)  # huggingface_hub's own metadata: not extra
    (directory / ".cache" / "huggingface" / ".gitignore").write_text("*")
    for quick in (False, True):
        args = ["verify", "--lock", str(lock_file), "--dir", str(directory)] + (["--quick"] if quick else [])
        code, data, _, _ = run_models(env, *args)
        assert code == 1
        assert {(p["path"], p["kind"]) for p in data["problems"]} == {
            ("config.json", "missing"), ("tokenizer.model", "size"),
        }  # fmt: skip
        assert data["extra"] == ["model-00003-of-00002.safetensors", "original/notes.txt"]
    text = subprocess.run(
        models_cmd("verify", "--lock", str(lock_file), "--dir", str(directory)), env=env, capture_output=True, text=True
    )
    assert "MISSING    config.json" in text.stdout and "EXTRA      model-00003-of-00002.safetensors" in text.stdout
    assert "FAILED (sizes and sha256): 1 differ, 1 missing, 2 extra" in text.stderr
    code, data, _, _ = run_models(env, "verify", "--lock", str(lock_file), "--dir", str(directory / "nope"))
    assert code == 1 and data["error"]["kind"] == "missing" and "models fetch" in data["error"]["message"]


def test_fetch_repairs_a_damaged_file_and_leaves_files_of_the_user_alone(hub, env, fetched):
    lock_file, lock, directory = fetched
    shard = directory / "model-00002-of-00002.safetensors"
    data = bytearray(shard.read_bytes())
    data[12345] ^= 0xFF
    shard.write_bytes(bytes(data))  # same size, new content: the recorded stamp no longer matches
    (directory / "mine.txt").write_text("kept")
    code, out, _, _ = run_models(env, "fetch", "--lock", str(lock_file), "--dir", str(directory))
    assert code == 0 and [o["path"] for o in out["outcomes"] if o["status"] == "downloaded"] == [shard.name]
    assert shard.read_bytes() == sample_files()[shard.name]
    assert out["extra"] == ["mine.txt"] and (directory / "mine.txt").read_text() == "kept"


def test_a_new_lock_replaces_what_the_old_one_placed_but_nothing_else(hub, env, tmp_path, fetched):
    lock_file, lock, directory = fetched
    files = {k: v for k, v in sample_files().items() if k != "tokenizer.model"}
    files["config.json"] = b'{"architectures": ["LlamaForCausalLMEagle3"], "v": 2}'
    hub.commit(REPO_ID, files)
    new_lock = tmp_path / "new.lock.json"
    assert run_models(env, "lock", REPO_ID, "--output", str(new_lock))[0] == 0
    (directory / "mine.txt").write_text("kept")
    code, out, _, _ = run_models(env, "fetch", "--lock", str(new_lock), "--dir", str(directory))
    assert code == 0 and out["removed"] == ["tokenizer.model"] and out["extra"] == ["mine.txt"]
    assert [o["path"] for o in out["outcomes"] if o["status"] == "downloaded"] == ["config.json"]
    assert (directory / "config.json").read_bytes() == files["config.json"]


# -- the lock wins against the hub -------------------------------------------------------------------


@both_hubs
def test_a_file_replaced_upstream_fails_its_hash_and_is_not_put_in_place(hub, env, tmp_path):
    lock_file, lock = lock_model(env, tmp_path)
    commit = lock["commit"]
    hub.rewrite(REPO_ID, commit, "model-00002-of-00002.safetensors", random.Random(9).randbytes(12 * MiB))
    hub.rewrite(REPO_ID, commit, "config.json", b'{"architectures": ["Evil"]}')
    directory = tmp_path / "model"
    code, data, _, _ = run_models(env, "fetch", "--lock", str(lock_file), "--dir", str(directory))
    assert code == 1
    failed = {o["path"]: o["error"] for o in data["outcomes"] if o["status"] == "failed"}
    assert set(failed) == {"model-00002-of-00002.safetensors", "config.json"}
    assert all(e["kind"] == "mismatch" and "lock the model again" in e["message"] for e in failed.values())
    # Printed as "FAILED  PATH: MESSAGE": the message does not name the file a second time.
    assert all(e["message"].startswith("the hub served ") for e in failed.values()), failed
    assert "the hub served sha256" in failed["model-00002-of-00002.safetensors"]["message"]
    assert not (directory / "model-00002-of-00002.safetensors").exists() and not (directory / "config.json").exists()
    assert not any((directory / ".sglang-eagle3" / "staging").iterdir())  # rejected bytes are not kept to resume
    assert all(locked_files_in(directory, lock).values())  # the other files are in place, verified
    code, data, _, _ = run_models(env, "verify", "--lock", str(lock_file), "--dir", str(directory))
    assert code == 1 and {p["path"] for p in data["problems"]} == set(failed)


def test_a_new_commit_upstream_does_not_change_what_the_lock_fetches(hub, env, tmp_path):
    lock_file, lock = lock_model(env, tmp_path)
    hub.commit(REPO_ID, {**sample_files(), "model-00002-of-00002.safetensors": b"re-uploaded"})
    directory = tmp_path / "model"
    assert run_models(env, "fetch", "--lock", str(lock_file), "--dir", str(directory))[0] == 0
    assert (directory / "model-00002-of-00002.safetensors").read_bytes() == sample_files()[
        "model-00002-of-00002.safetensors"
    ]


@both_hubs
def test_a_locked_commit_that_is_gone_is_a_clear_error(hub, env, tmp_path):
    lock_file, lock = lock_model(env, tmp_path)
    del hub.repos[REPO_ID].commits[lock["commit"]]  # history rewritten (force push)
    code, data, _, _ = run_models(env, "fetch", "--lock", str(lock_file), "--dir", str(tmp_path / "model"))
    assert code == 2 and data["error"]["kind"] == "revision_not_found"
    assert "history was rewritten" in data["error"]["message"]
    assert data["failed"] == len(lock["files"])  # stopped after the first answer, not once per file


@pytest.fixture
def dead_hub(env):
    """HF_ENDPOINT at a closed port on loopback (bound, never listening: every connection is refused)."""
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        yield {**env, "HF_ENDPOINT": f"http://127.0.0.1:{closed.getsockname()[1]}"}


# huggingface_hub retries a refused connection 5 times, 1+2+4+8+8 s apart: the tests skip the waits
# (the client's only use of time), nothing else.
NO_BACKOFF_WAITS = (
    "import sys, types, huggingface_hub.utils._http as http; http.time = types.SimpleNamespace(sleep=lambda _: None); "
    "from sglang_eagle3.cli import main; sys.argv[0] = 'sglang-eagle3'; main()"
)


def run_models_without_backoff_waits(env: dict, *args: str) -> tuple[int, dict | None, str]:
    command = [models_cmd()[0], "-c", NO_BACKOFF_WAITS, "models", *args, "--json"]
    result = subprocess.run(command, capture_output=True, text=True, env=env, timeout=120)
    return result.returncode, json.loads(result.stdout), result.stderr


@both_hubs
def test_an_unreachable_hub_is_a_network_error_that_stops_the_fetch(env, dead_hub, tmp_path):
    lock_file, lock = lock_model(env, tmp_path)
    code, data, err = run_models_without_backoff_waits(
        dead_hub, "fetch", "--lock", str(lock_file), "--dir", str(tmp_path / "model"), "--jobs", "2"
    )
    assert code == ExitStatus.CHECK_FAILED, err
    assert data["error"]["kind"] == "network", data["error"]
    assert "cannot reach the hub at http://127.0.0.1:" in data["error"]["message"]
    assert "Connection refused" in data["error"]["message"]
    failed = [o for o in data["outcomes"] if o["status"] == "failed"]
    assert 1 <= len(failed) <= 2 and all(o["error"]["kind"] == "network" for o in failed), failed
    # Stopped early: the files after the first answers were never tried.
    assert sum(o["status"] == "not_started" for o in data["outcomes"]) == len(lock["files"]) - len(failed)


# What another download thread's failed connection does to huggingface_hub 1.x's shared client (utils/_http.py:
# close_session() on httpx.ConnectError): a request then finds no client (close_session ran between get_session's
# check and its return) or the client closed under it. Here it happens to the first request of the fetch.
CLOSED_UNDER = {
    "no client": "lambda: None",
    "closed client": "lambda: (real(), http.close_session())[0]",
}


@pytest.mark.parametrize("client", [v for v in sorted(HUBS) if v.startswith("1.")], indirect=True,
                         ids=lambda v: f"hub-{v}")  # fmt: skip
@pytest.mark.parametrize("how", sorted(CLOSED_UNDER))
def test_a_download_whose_shared_client_was_closed_under_it_is_tried_again(hub, env, tmp_path, client, how):
    """Seen in CI under load: `fetch --jobs 2` from a hub that refuses connections reported one file as
    "hub_error: AttributeError ... 'NoneType' object has no attribute 'request'" and went on to start a third."""
    lock_file, lock = lock_model(env, tmp_path)
    prelude = (
        "import sys, huggingface_hub.utils._http as http\nreal, calls = http.get_session, []\n"
        f"def get_session():\n    calls.append(1)\n    return ({CLOSED_UNDER[how]})() if len(calls) == 1 else real()\n"
        "http.get_session = get_session\n"
        "from sglang_eagle3.cli import main; sys.argv[0] = 'sglang-eagle3'; main()"
    )
    directory = tmp_path / "model"
    result = subprocess.run([models_cmd()[0], "-c", prelude, "models", "fetch", "--lock", str(lock_file), "--dir",
                             str(directory), "--jobs", "2", "--json"], capture_output=True, text=True, env=env,
                            timeout=120)  # fmt: skip
    data = json.loads(result.stdout)
    assert result.returncode == 0 and data["downloaded"] == len(lock["files"]), data
    code, verified, _, err = run_models(env, "verify", "--lock", str(lock_file), "--dir", str(directory))
    assert code == 0 and verified["ok"], err


def test_a_client_closed_under_every_try_is_a_cut_off_download_to_run_again():
    """hub.translate: the same failure on every try names what happened and what to do, not an AttributeError."""
    from sglang_eagle3.models import hub as models_hub

    try:
        None.request  # noqa: B018 (what huggingface_hub's client=None raises)
    except AttributeError as err:
        error = models_hub.translate(err, repo="o/r", revision="c", path="model.safetensors")
    assert error.kind == "interrupted" and "model.safetensors of o/r was cut off" in str(error)
    assert "run the same command again" in str(error)
    closed = models_hub.translate(RuntimeError("Cannot send a request, as the client has been closed."), repo="o/r",
                                  revision="c", path="x")  # fmt: skip
    assert closed.kind == "interrupted"
    assert models_hub.translate(AttributeError("other"), repo="o/r", revision="c").kind == "hub_error"


@both_hubs
def test_lock_against_an_unreachable_hub_says_so_and_promises_no_resume(dead_hub, tmp_path):
    code, data, _, err = run_models(dead_hub, "lock", REPO_ID, "--output", str(tmp_path / "x.json"))
    assert code == ExitStatus.CHECK_FAILED, err
    assert data["error"]["kind"] == "network" and "cannot reach the hub at" in data["error"]["message"]
    assert "resume" not in data["error"]["message"]  # nothing was downloading
    assert not (tmp_path / "x.json").exists()


# -- gated repositories and the token ----------------------------------------------------------------


@pytest.fixture
def gated(tmp_path):
    token = "hf_" + secrets.token_hex(20)
    with hub_with_model(gated=True, tokens=(token,)) as hub:
        token_file = tmp_path / "hf-token"
        token_file.write_text(token + "\n")
        token_file.chmod(0o600)
        yield hub, token, token_file


@both_hubs
def test_a_gated_repository_without_a_token_says_how_to_give_one(gated, tmp_path, client):
    hub, token, token_file = gated
    env = client.env(models_env(hub, tmp_path))
    code, data, _, _ = run_models(env, "lock", REPO_ID, "--output", str(tmp_path / "x.json"))
    assert code == 2 and data["error"]["kind"] == "gated" and "--token-file" in data["error"]["message"]
    code, data, _, err = run_models(
        env, "lock", REPO_ID, "--output", str(tmp_path / "x.json"), "--token-file", str(token_file)
    )
    assert code == 0, err
    lock_file = tmp_path / "x.json"
    assert json.loads(lock_file.read_text())["gated"] is True
    asked = len(hub.log)
    code, data, _, _ = run_models(env, "fetch", "--lock", str(lock_file), "--dir", str(tmp_path / "m"))
    assert code == 2 and data["error"]["kind"] == "gated" and "hf-token" in data["error"]["message"]
    assert len(hub.log) == asked  # known from the lock: nothing was asked of the hub

    wrong = tmp_path / "wrong-token"
    wrong.write_text("hf_" + secrets.token_hex(20))
    asked = len(hub.log)
    code, data, _, _ = run_models(
        env, "fetch", "--lock", str(lock_file), "--dir", str(tmp_path / "m"), "--token-file", str(wrong)
    )
    assert code == 2 and data["error"]["kind"] == "gated" and "the token has no access" in data["error"]["message"]
    assert {r["status"] for r in hub.log[asked:] if "/resolve/" in r["path"]} == {403}


@both_hubs
def test_a_repository_gated_after_locking_is_reported_by_the_hub(hub, env, tmp_path):
    lock_file, _ = lock_model(env, tmp_path)
    hub.repos[REPO_ID].gated = True
    code, data, _, _ = run_models(env, "fetch", "--lock", str(lock_file), "--dir", str(tmp_path / "m"))
    assert code == 2 and data["error"]["kind"] == "gated"
    assert 401 in {r["status"] for r in hub.requests(method="HEAD")}


@both_hubs
def test_the_token_is_never_in_argv_environment_or_output(gated, tmp_path, client):
    hub, token, token_file = gated
    # HF_DEBUG makes huggingface_hub log every request it sends: the test would see a token there.
    env = client.env(models_env(hub, tmp_path, HF_DEBUG="1", HF_HUB_VERBOSITY="debug"))
    code, _, out, err = run_models(
        env, "lock", REPO_ID, "--output", str(tmp_path / "x.json"), "--token-file", str(token_file)
    )
    assert code == 0 and "curl" in err  # the debug log is on
    assert token not in out + err
    hub.pause_after(5 * MiB)
    command = models_cmd("fetch", "--lock", str(tmp_path / "x.json"), "--dir", str(tmp_path / "m"))
    proc = subprocess.Popen(
        [*command, "--token-file", str(token_file)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    assert wait_paused_or_exit(hub, proc)
    cmdline = Path(f"/proc/{proc.pid}/cmdline").read_bytes()
    environ = Path(f"/proc/{proc.pid}/environ").read_bytes()
    hub.release()
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, out + err[-3000:]  # a file that failed is named on stdout, with its error
    assert token.encode() not in cmdline and token.encode() not in environ
    assert token not in out + err
    # The hub got it; the CDN, another host, never did; nor 1.x's request for its agent registry.
    hub_requests = [r for r in hub.log if r["host"] == f"127.0.0.1:{hub.port}" and "/resolve/" in r["path"]]
    assert hub_requests and all(r["authorization"] == f"Bearer {token}" for r in hub_requests)
    assert all(r["authorization"] is None for r in hub.log if r["path"] == "/api/agent-harnesses")
    assert all(r["authorization"] is None for r in hub.log if r["host"] == f"localhost:{hub.port}")


@both_hubs
def test_the_token_comes_from_the_systemd_credential_and_never_from_the_environment(gated, tmp_path, client):
    hub, token, token_file = gated
    credentials = tmp_path / "credentials"
    credentials.mkdir()
    shutil.copy(token_file, credentials / "hf-token")
    env = client.env(models_env(hub, tmp_path, CREDENTIALS_DIRECTORY=str(credentials)))
    code, _, _, err = run_models(env, "lock", REPO_ID, "--output", str(tmp_path / "x.json"))
    assert code == 0, err
    # A token in the environment is not used (and said so): it would leak to every child process.
    env = client.env(models_env(hub, tmp_path, HF_TOKEN=token))
    code, data, _, err = run_models(env, "fetch", "--lock", str(tmp_path / "x.json"), "--dir", str(tmp_path / "m"))
    assert code == 2 and data["error"]["kind"] == "gated"
    assert "HF_TOKEN in the environment is ignored" in err and token not in err


@both_hubs
@pytest.mark.parametrize(
    "content, message",
    [("", "is empty"), ("hf_abc\nhf_def\n", "one token on one line"), (None, "cannot read the token file")],
)
def test_a_bad_token_file_is_named_but_never_shown(hub, env, tmp_path, content, message):
    token_file = tmp_path / "token"
    if content is not None:
        token_file.write_text(content)
    code, data, _, _ = run_models(
        env, "lock", REPO_ID, "--output", str(tmp_path / "x.json"), "--token-file", str(token_file)
    )
    assert code == 2 and data["error"]["kind"] == "token" and message in data["error"]["message"]
    assert str(token_file) in data["error"]["message"] and "hf_abc" not in data["error"]["message"]


# -- malformed locks --------------------------------------------------------------------------------


def _mutations():
    def edit(fn):
        def apply(lock):
            fn(lock)
            return json.dumps(lock)

        return apply

    return [
        ("not json", lambda lock: "{not json", "is not valid JSON"),
        ("a list", lambda lock: "[]", "expected a JSON object"),
        ("no commit", edit(lambda lock: lock.pop("commit")), "commit: Field required"),
        ("short commit", edit(lambda lock: lock.update(commit="abc123")), "commit: String should match pattern"),
        ("bad sha256", edit(lambda lock: lock["files"][0].update(sha256="xyz")), "files.0.sha256"),
        ("escaping path", edit(lambda lock: lock["files"][0].update(path="../../etc/passwd")), "'..'"),
        ("absolute path", edit(lambda lock: lock["files"][0].update(path="/etc/passwd")), "relative path"),
        ("duplicate", edit(lambda lock: lock["files"].append(lock["files"][0])), "listed twice"),
        ("total", edit(lambda lock: lock.update(total_size=1)), "total_size 1 is not the sum"),
        ("format", edit(lambda lock: lock.update(format="pip-lock")), "not a model lock"),
        ("version", edit(lambda lock: lock.update(version=2)), "lock version 2 is not supported"),
        ("tool dir", edit(lambda lock: lock["files"][0].update(path=".sglang-eagle3/state.json")), "the tools keep"),
        ("unknown field", edit(lambda lock: lock.update(mirror="x")), "mirror: Extra inputs are not permitted"),
    ]


@pytest.mark.parametrize("name, mutate, message", _mutations(), ids=[m[0] for m in _mutations()])
def test_a_malformed_lock_is_bad_input_naming_the_field(hub, env, tmp_path, name, mutate, message):
    lock_file, lock = lock_model(env, tmp_path)
    bad = tmp_path / "bad.lock.json"
    bad.write_text(mutate(json.loads(json.dumps(lock))))
    for command in ("fetch", "verify"):
        code, data, _, _ = run_models(env, command, "--lock", str(bad), "--dir", str(tmp_path / "m"))
        assert code == 2 and data["error"]["kind"] == "bad_lock", (command, data)
        assert message in data["error"]["message"] and str(bad) in data["error"]["message"]
    assert not (tmp_path / "m").exists()


def test_a_lock_that_is_not_text_is_bad_input_naming_the_file(hub, env, tmp_path):
    """A zip (or any binary) given as the lock: exit 2, the message names the file, nothing is created."""
    for name, content in (("random.zip", random.Random(1).randbytes(300)), ("latin1.json", b'{"repo": "\xe9"}')):
        bad = tmp_path / name
        bad.write_bytes(content)
        for command in ("fetch", "verify"):
            code, data, _, err = run_models(env, command, "--lock", str(bad), "--dir", str(tmp_path / "m"))
            assert code == 2 and data["error"]["kind"] == "bad_lock", (command, data, err)
            assert str(bad) in data["error"]["message"] and "UTF-8" in data["error"]["message"]
            assert "a file is not" not in data["error"]["message"] and "Traceback" not in err
    assert not (tmp_path / "m").exists()


@pytest.mark.parametrize("where", ["the file", "below the file"])
def test_a_model_directory_that_is_a_file_is_bad_input(hub, env, tmp_path, where):
    """--dir naming a regular file (or a path through one): exit 2 before anything is downloaded; the file is
    left as it was. verify says the same of a file."""
    lock_file, _ = lock_model(env, tmp_path)
    a_file = tmp_path / "weights.bin"
    a_file.write_bytes(b"the user's data")
    target = a_file if where == "the file" else a_file / "model"
    commands = ("fetch", "verify") if where == "the file" else ("fetch",)
    sent = hub.bytes_sent
    for command in commands:
        code, data, _, err = run_models(env, command, "--lock", str(lock_file), "--dir", str(target))
        assert code == ExitStatus.BAD_INPUT and data["error"]["kind"] == "bad_input", (command, data, err)
        assert str(target) in data["error"]["message"] and "Traceback" not in err
    assert a_file.read_bytes() == b"the user's data" and hub.bytes_sent == sent  # nothing was downloaded


def test_a_lock_output_that_cannot_be_written_is_refused_before_the_hub_is_asked(tmp_path):
    """`models lock -o FILE/x` (a path through a file): exit 2 at once, not after resolving the repository (the
    hub here does not even answer)."""
    a_file = tmp_path / "notes.txt"
    a_file.write_text("mine")
    with refused_port() as port:  # the test's own port: 9 may be another job's
        env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")} | {
            "HF_ENDPOINT": f"http://127.0.0.1:{port}"
        }
        code, data, _, err = run_models(env, "lock", REPO_ID, "--output", str(a_file / "model.lock.json"), timeout=60)
    assert code == ExitStatus.BAD_INPUT and data["error"]["kind"] == "bad_input", (data, err)
    assert str(a_file) in data["error"]["message"] and a_file.read_text() == "mine"


# -- the disk fills up --------------------------------------------------------------------------------


def _namespace_tmpfs(directory: Path, size: str) -> subprocess.Popen:
    """A private mount namespace with a small tmpfs on directory, held open by a sleeping process."""
    directory.mkdir(parents=True)
    holder = subprocess.Popen(
        ["unshare", "--mount", "--propagation", "private", "sh", "-c",
         f'mount -t tmpfs -o size={size} tmpfs "{directory}" && echo ready && exec sleep 600'],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    if holder.stdout.readline().strip() != "ready":
        holder.kill()
        pytest.skip(f"cannot mount a tmpfs in a private mount namespace: {holder.stderr.read().strip()}")
    return holder


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("unshare") or not shutil.which("nsenter"),
                    reason="needs root, unshare and nsenter (util-linux) to mount a small tmpfs")  # fmt: skip
@both_hubs
def test_a_full_disk_is_reported_and_the_fetch_resumes_once_there_is_room(hub, env, tmp_path):
    lock_file, lock = lock_model(env, tmp_path)
    directory = tmp_path / "small-disk"
    holder = _namespace_tmpfs(directory, "45m")  # room for the model (37.5 MB) and little else
    inside = Path(f"/proc/{holder.pid}/root") / directory.relative_to("/")

    def fetch_in_namespace(*extra):
        command = ["nsenter", f"--target={holder.pid}", "--mount", "--", *models_cmd(*extra, "--json")]
        return subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    try:
        hub.pause_after(14 * MiB)  # the first 10 MiB of the largest shard are written, then the hub holds
        proc = fetch_in_namespace("fetch", "--lock", str(lock_file), "--dir", str(directory), "--jobs", "1")
        assert wait_paused_or_exit(hub, proc)
        with open(inside / "filler", "wb", buffering=0) as filler:  # someone else fills the disk meanwhile
            try:
                while True:
                    filler.write(b"\0" * MiB)
            except OSError as err:
                assert err.errno == 28  # ENOSPC
        hub.release()
        out, err = proc.communicate(timeout=120)
        data = json.loads(out)
        assert proc.returncode == 1 and data["error"]["kind"] == "disk_full", data
        assert "free space" in data["error"]["message"] and "run the same command again" in data["error"]["message"]
        assert all(locked_files_in(inside, lock).values())  # nothing partial under a locked name

        (inside / "filler").unlink()
        proc = fetch_in_namespace("fetch", "--lock", str(lock_file), "--dir", str(directory))
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        proc = fetch_in_namespace("verify", "--lock", str(lock_file), "--dir", str(directory))
        out, _ = proc.communicate(timeout=120)
        assert proc.returncode == 0 and json.loads(out)["ok"]

        # Not enough room from the start: refused before any byte is downloaded.
        gets = len(hub.requests(method="GET"))
        proc = fetch_in_namespace("fetch", "--lock", str(lock_file), "--dir", str(directory / "second"))
        out, _ = proc.communicate(timeout=120)
        data = json.loads(out)
        assert proc.returncode == 1 and data["error"]["kind"] == "disk_full" and "free" in data["error"]["message"]
        assert len(hub.requests(method="GET")) == gets
    finally:
        holder.kill()
        holder.wait()


# -- progress ----------------------------------------------------------------------------------------


def test_progress_in_logs_shows_bytes_rate_and_time_left(hub, env, tmp_path):
    lock_file, lock = lock_model(env, tmp_path)
    hub.pause_after(15 * MiB)
    proc = subprocess.Popen(
        models_cmd("fetch", "--lock", str(lock_file), "--dir", str(tmp_path / "m"), "--progress-interval", "0.2"),
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert wait_paused_or_exit(hub, proc)
    time.sleep(1)
    hub.release()
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    lines = [line for line in err.splitlines() if line.startswith("download: ")]
    assert len(lines) >= 3, err
    total = human_bytes(lock["total_size"])
    line = re.compile(rf"download: [0-9.]+ k?M?B of {total} \(\d+%\), [0-9.]+ k?M?B/s(, about .+ left|, [0-9.]+ s)?")
    assert all(line.fullmatch(x) for x in lines), lines
    assert any(x.endswith("left") for x in lines[:-1])
    assert lines[-1].startswith(f"download: {total} of {total} (100%)")


def test_progress_on_a_terminal_is_a_bar(hub, env, tmp_path):
    import pty

    lock_file, lock = lock_model(env, tmp_path)
    leader, follower = pty.openpty()
    proc = subprocess.Popen(
        models_cmd("fetch", "--lock", str(lock_file), "--dir", str(tmp_path / "m")),
        env={**env, "COLUMNS": "120"}, stdout=subprocess.DEVNULL, stderr=follower,
    )  # fmt: skip
    os.close(follower)
    output = b""
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:
            break
        if not chunk:
            break
        output += chunk
    os.close(leader)
    assert proc.wait(timeout=120) == 0
    text = output.decode(errors="replace")
    total = human_bytes(lock["total_size"]).removesuffix(" MB")
    assert "download" in text and f"{total}/{total} MB" in text and "MB/s" in text


# -- the draft checks' hub cache, under both hubs ---------------------------------------------------

LOCATE = """
import json, sys
from huggingface_hub import __version__, scan_cache_dir
from sglang_eagle3.models.draft_inputs import DraftInputError, locate
out = {"version": __version__, "cached": sorted(r.repo_id for r in scan_cache_dir(sys.argv[1]).repos)}
for given in sys.argv[2:]:
    try:
        found = locate(given, "draft model")
        out[given] = [found.source, found.directory and str(found.directory)]
    except DraftInputError as err:
        out[given] = ["error", str(err)]
print(json.dumps(out))
"""


@both_hubs
def test_the_draft_checks_find_hub_ids_in_the_local_cache(tmp_path, client):
    """The probe's and preflight's hub ids (models/draft_inputs.py `locate`, through the client's
    snapshot_download with local_files_only) under each stack's hub; the full checks are in
    tests/test_draft_check.py."""
    cache = tmp_path / "hub"
    snapshot = hub_cache_snapshot(cache, "someone/kimi-eagle3")
    write_draft(snapshot, eagle3_draft_config((2, 30, 58)), d2t_rows=32)
    env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    env = client.env({**env, "HF_HUB_CACHE": str(cache), "HF_HUB_OFFLINE": "1"})
    ids = ["someone/kimi-eagle3", "someone/not-downloaded", "not a hub id!"]
    result = subprocess.run([models_cmd()[0], "-c", LOCATE, str(cache), *ids], capture_output=True, text=True, env=env)
    assert result.returncode == 0, result.stderr
    found = json.loads(result.stdout)
    assert found["version"] == client.version and found["cached"] == ["someone/kimi-eagle3"]
    assert found["someone/kimi-eagle3"] == ["Hugging Face cache", str(snapshot)]
    assert found["someone/not-downloaded"] == ["not in the local Hugging Face cache", None]
    assert found["not a hub id!"][0] == "error"
    assert "is neither an existing directory nor a Hugging Face id" in found["not a hub id!"][1]


# -- settings and preflight ----------------------------------------------------------------------------


def test_preflight_warns_about_hub_ids_without_a_pinned_commit(tmp_path):
    sha = "0123456789abcdef0123456789abcdef01234567"
    cases = {
        (None, None): ("warn", "warn"),
        ("main", "v1.0"): ("warn", "warn"),
        (sha, sha): ("ok", "ok"),
    }
    for (revision, draft_revision), verdicts in cases.items():
        s = settings.ServerSettings(revision=revision, speculative_draft_model_revision=draft_revision)
        report = preflight.Preflight()
        preflight.check_model_dir(report, "model", s.model_path, s.revision)
        preflight.check_model_dir(
            report, "draft model", s.speculative_draft_model_path, s.speculative_draft_model_revision,
            "speculative_draft_model_revision",
        )  # fmt: skip
        assert tuple(c.status for c in report.findings) == verdicts
    report = preflight.Preflight()
    preflight.check_model_dir(report, "model", "nvidia/Kimi-K2.5-NVFP4", None)
    assert (
        "no pinned revision" in report.findings[0].message
        and "models lock nvidia/Kimi-K2.5-NVFP4" in report.findings[0].message
    )
    report = preflight.Preflight()
    preflight.check_model_dir(
        report, "draft model", "AQ-MedAI/Kimi-K25-eagle3", "v1.0", "speculative_draft_model_revision"
    )
    assert "'v1.0' is a branch or tag" in report.findings[0].message
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    report = preflight.Preflight()
    preflight.check_model_dir(report, "model", str(model), sha)
    assert report.findings[0].status == "warn" and "ignored for a local directory" in report.findings[0].message
