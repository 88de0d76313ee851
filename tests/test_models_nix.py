"""Model locks on the Nix side: nix/fetch-model.nix and services.sglang-eagle3.models.

- fetch-model.nix is evaluated with `nix-instantiate --eval` against a tiny stand-in of
  nixpkgs' fetchurl and linkFarm (they only record their arguments; there is no nixpkgs
  here, the lead's fuller stand-in evaluates it too). The URLs it builds are then fetched
  from the stand-in hub: what Nix would download is what the lock pins.
- The NixOS module is evaluated with nixpkgs' lib (NIXPKGS_LIB) through
  tests/nix/module-harness.nix; the models unit's own commands are then run against the
  stand-in hub, with the token delivered as systemd's LoadCredential would.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
from conftest import REPO
from sglang_eagle3.judging import preflight
from sglang_eagle3.serving import settings
from stand_ins.fake_hub import FakeHub
from support.models_fixtures import REPO_ID, models_env, run_models, sample_files
from support.nix_harness import NIXPKGS_LIB, evaluate_module, evaluate_module_error, verify_unit

NIX = shutil.which("nix-instantiate")
needs_nix = pytest.mark.skipif(NIX is None, reason="needs nix-instantiate (Debian: apt-get install nix-bin)")
needs_lib = pytest.mark.skipif(
    not (NIX and NIXPKGS_LIB), reason="needs NIXPKGS_LIB=<path to nixpkgs' lib/ directory> to evaluate the module"
)
FETCH_MODEL = REPO / "nix" / "fetch-model.nix"
# Stand-ins for nixpkgs' fetchurl and linkFarm that record what they are given.
TINY_NIXPKGS = """
  fetchurl = args: { fetchurlArgs = args; };
  linkFarm = name: entries: {
    inherit name;
    entries = map (e: { inherit (e) name; fetchurl = e.path.fetchurlArgs; }) entries;
  };
"""


def nix_eval_result(expr: str) -> subprocess.CompletedProcess:
    return subprocess.run([NIX, "--eval", "--strict", "--json", "-E", expr], capture_output=True, text=True)


def fetch_model(lock_file: Path, endpoint: str) -> subprocess.CompletedProcess:
    expr = (
        f"let {TINY_NIXPKGS} in import {FETCH_MODEL} {{ inherit fetchurl linkFarm; }} "
        f'{{ lockFile = {lock_file}; endpoint = "{endpoint}"; }}'
    )
    return nix_eval_result(expr)


@pytest.fixture
def hub():
    with FakeHub() as h:
        h.commit(REPO_ID, sample_files())
        yield h


@pytest.fixture
def lock_file(hub, tmp_path) -> Path:
    out = tmp_path / "draft.lock.json"
    code, _, _, err = run_models(models_env(hub, tmp_path), "lock", REPO_ID, "--output", str(out))
    assert code == 0, err
    return out


# -- fetch-model.nix ------------------------------------------------------------------------------


@needs_nix
def test_fetch_model_is_one_fixed_output_fetch_per_file_joined_into_the_model_directory(hub, lock_file):
    lock = json.loads(lock_file.read_text())
    result = fetch_model(lock_file, hub.url)
    assert result.returncode == 0, result.stderr
    farm = json.loads(result.stdout)
    assert farm["name"] == f"tiny-eagle3-{lock['commit'][:12]}"
    assert [e["name"] for e in farm["entries"]] == [f["path"] for f in lock["files"]]
    for entry, f in zip(farm["entries"], lock["files"], strict=True):
        args = entry["fetchurl"]
        assert args["sha256"] == f["sha256"]
        assert re.fullmatch(r"[A-Za-z0-9+._?=-]+", args["name"]) and not args["name"].startswith(".")
        # The URL is the hub's resolve URL at the locked commit, quoted as huggingface_hub quotes it...
        assert args["url"] == f"{hub.url}/{REPO_ID}/resolve/{lock['commit']}/{urllib.parse.quote(f['path'])}"
        # ...and what it serves (after the CDN redirect for LFS files) has the sha256 Nix will check.
        with urllib.request.urlopen(args["url"], timeout=30) as response:
            assert hashlib.sha256(response.read()).hexdigest() == f["sha256"], f["path"]


@needs_nix
@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda lock: lock.update(gated=True), "is gated or private"),
        (lambda lock: lock["files"][0].pop("sha256"), "has no sha256"),
        (lambda lock: lock["files"][0].update(path="modèle.bin"), "only ASCII file names"),
        (lambda lock: lock.update(version=2), "lock version 2 is not supported"),
        (lambda lock: lock.update(commit="main"), "is not a 40-hex commit"),
    ],
    ids=["gated", "no-sha256", "non-ascii", "version", "commit"],
)
def test_fetch_model_refuses_what_it_cannot_fetch_reproducibly(hub, lock_file, tmp_path, edit, message):
    lock = json.loads(lock_file.read_text())
    edit(lock)
    bad = tmp_path / "bad.lock.json"
    bad.write_text(json.dumps(lock))
    result = fetch_model(bad, hub.url)
    assert result.returncode != 0 and message in result.stderr and str(bad) in result.stderr


# -- services.sglang-eagle3.models --------------------------------------------------------------------


def evaluate_host(models: str, extra: str = "") -> dict:
    config = f"""{{ lib, ... }}: {{
      services.sglang-eagle3 = {{
        enable = true;
        gpus = [ 0 1 2 3 4 5 6 7 ];
        apiKeyFile = "/run/secrets/sglang-api-key";
        models = {models};
      }} // {extra or "{ }"};
    }}"""
    return evaluate_module(config)


@pytest.fixture
def two_locks(tmp_path):
    """A gated target and a public draft on the stand-in hub, locked."""
    token = "hf_" + os.urandom(16).hex()
    with FakeHub() as hub:
        hub.commit("test-org/tiny-target", sample_files(1), gated=True)
        hub.repos["test-org/tiny-target"].tokens.add(token)
        hub.commit(REPO_ID, sample_files())
        token_file = tmp_path / "hf-token"
        token_file.write_text(token)
        env = models_env(hub, tmp_path)
        locks = tmp_path / "locks"
        for repo in ("test-org/tiny-target", REPO_ID):
            code, _, _, err = run_models(env, "lock", repo, "--output", f"{locks}/", "--token-file", str(token_file))
            assert code == 0, err
        yield (
            hub,
            token,
            token_file,
            locks / "test-org--tiny-target.lock.json",
            locks / "test-org--tiny-eagle3.lock.json",
        )


@needs_lib
def test_the_server_starts_after_the_models_unit_offline_and_without_the_token(two_locks, tmp_path):
    hub, token, token_file, target_lock, draft_lock = two_locks
    out = evaluate_host(
        f'{{ target.lockFile = {target_lock}; draft.lockFile = {draft_lock}; tokenFile = "/run/secrets/hf-token"; }}'
    )
    assert out["failedAssertions"] == []
    server, models = out["services"]["sglang-eagle3"], out["services"]["sglang-eagle3-models"]

    assert "sglang-eagle3-models.service" in server["requires"] and "sglang-eagle3-models.service" in server["after"]
    assert server["environment"]["HF_HUB_OFFLINE"] == "1"
    assert server["serviceConfig"]["LoadCredential"] == ["api-key:/run/secrets/sglang-api-key"]
    assert server["serviceConfig"]["ReadOnlyPaths"] == ["/var/lib/sglang-eagle3/models"]
    assert "hf-token" not in json.dumps(server) and token not in json.dumps(out)

    # The settings point at the fetched directories (and the launcher's own loader accepts them).
    rendered = tmp_path / "settings.json"
    rendered.write_text(json.dumps(out["settings"]))
    loaded = settings.load(rendered, environ={})
    assert loaded.model_path == "/var/lib/sglang-eagle3/models/tiny-target"
    assert loaded.speculative_draft_model_path == "/var/lib/sglang-eagle3/models/tiny-eagle3"
    assert loaded.revision is None and loaded.speculative_draft_model_revision is None

    sc = models["serviceConfig"]
    assert sc["Type"] == "oneshot" and sc["RemainAfterExit"] is True
    assert sc["LoadCredential"] == ["hf-token:/run/secrets/hf-token"]
    assert sc["DynamicUser"] is True and sc["User"] == "sglang-eagle3"  # the server's user: it reads these files
    assert sc["StateDirectory"] == "sglang-eagle3/models" and sc["PrivateDevices"] is True
    hardening = (
        "ProtectSystem",
        "ProtectHome",
        "PrivateTmp",
        "NoNewPrivileges",
        "CapabilityBoundingSet",
        "SystemCallFilter",
        "RestrictAddressFamilies",
        "UMask",
        "PrivateUsers",
        "ProtectKernelModules",
    )
    for key in hardening:
        assert sc[key] == server["serviceConfig"][key], key
    assert models["after"] == ["network-online.target"]

    # The unit's own commands, run here against the stand-in hub: each lock's store copy read from
    # where it came from (evaluation does not write the store), the models directory moved under
    # tmp, the token where LoadCredential puts it.
    credentials = tmp_path / "credentials"
    credentials.mkdir()
    shutil.copy(token_file, credentials / "hf-token")
    state = tmp_path / "var-lib-models"
    env = models_env(hub, tmp_path, CREDENTIALS_DIRECTORY=str(credentials))
    assert [c.split(" ")[1:3] for c in sc["ExecStart"]] == [["models", "fetch"], ["models", "verify"]] * 2
    for command in sc["ExecStart"]:
        command = command.replace("/var/lib/sglang-eagle3/models", str(state))
        for lock in (target_lock, draft_lock):
            command = re.sub(rf"/nix/store/[0-9a-z]{{32}}-{re.escape(lock.name)}", str(lock), command)
        exe, *args = command.split(" ")
        assert exe.endswith("/bin/sglang-eagle3") and token not in command and "token" not in command
        result = subprocess.run(
            [sys.executable, "-m", "sglang_eagle3.cli", *args], env=env, capture_output=True, text=True
        )
        assert result.returncode == 0, result.stderr
    report = preflight.Preflight()
    preflight.check_model_dir(report, "model", loaded.model_path.replace("/var/lib/sglang-eagle3/models", str(state)))
    preflight.check_model_dir(
        report, "draft", loaded.speculative_draft_model_path.replace("/var/lib/sglang-eagle3/models", str(state))
    )
    assert [c.status for c in report.findings] == ["ok", "ok"]


@needs_lib
@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="needs systemd-analyze (Debian: systemd)")
def test_the_models_unit_is_valid_and_no_more_exposed_than_the_server(two_locks, tmp_path):
    _, _, _, target_lock, draft_lock = two_locks
    out = evaluate_host(f'{{ target.lockFile = {target_lock}; draft.lockFile = {draft_lock}; tokenFile = "/run/k"; }}')
    exe = tmp_path / "sglang-eagle3"
    exe.write_text("#!/bin/sh\n")
    exe.chmod(0o755)
    exposure = {
        name: verify_unit(out["units"][f"{name}.service"], f"{name}.service", tmp_path, exe)
        for name in ("sglang-eagle3-models", "sglang-eagle3")
    }
    print(f"exposure: {exposure}")
    assert exposure["sglang-eagle3-models"] <= exposure["sglang-eagle3"]


@needs_lib
def test_module_assertions_for_models(two_locks):
    _, _, _, target_lock, draft_lock = two_locks
    out = evaluate_host(f"{{ target.lockFile = {target_lock}; }}", '{ settings.revision = "main"; }')
    assert any("settings.revision is set, but models.target.lockFile pins" in m for m in out["failedAssertions"])
    out = evaluate_host(f"{{ target.lockFile = {draft_lock}; draft.lockFile = {draft_lock}; }}")
    assert any("would both be fetched into" in m for m in out["failedAssertions"])
    out = evaluate_host(f'{{ target.lockFile = {draft_lock}; draft.lockFile = {draft_lock}; draft.name = "d"; }}')
    assert out["failedAssertions"] == []
    # A host that also sets the model path by hand gets the module system's conflict, naming both files.
    example = REPO / "modules" / "examples" / "8-gpu-host.nix"
    config = f"{{ imports = [ {example} ]; services.sglang-eagle3.models.target.lockFile = {target_lock}; }}"
    error = evaluate_module_error(config)
    assert "settings.model_path' has conflicting definition values" in error
    assert "8-gpu-host.nix" in error and "sglang-eagle3-models.nix" in error
    # Without locks the module changes nothing: no models unit, the server as before.
    out = evaluate_host("{ }")
    assert "sglang-eagle3-models" not in out["services"]
    assert "HF_HUB_OFFLINE" not in out["services"]["sglang-eagle3"]["environment"]
