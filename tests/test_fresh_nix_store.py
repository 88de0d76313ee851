"""Every run of the suite has a Nix store of its own, so nothing an earlier run built decides a test.

A fixed output already in the store is never built again: on a warm machine, a fetcher whose builder
cannot run (the stand-in's fetchurl without curl) passed, and the next, fresh machine failed.
tests/run (and so .ci/run) runs pytest through tests/support/fresh-nix-store, which binds an empty
directory over /nix in a mount namespace of the run's own. Here:
- this run's /nix is that directory;
- the same script, given a store that already holds a fixed output, shows what a warm store hides
  (the build "succeeds" without its builder running), and given nothing, runs the builder, which
  fails as it would on a fresh machine.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
from support import harness_env
from support.flake_eval import REPO

HELPER = REPO / "tests" / "support" / "fresh-nix-store"
# As the flake tests run Nix: root without a daemon, no build users, no binary cache, no sandbox
# (the stand-in's packages wrap this host's programs).
NIX_CONFIG = "\n".join(
    ["build-users-group =", "substituters =", "build-hook =", "sandbox = false", "experimental-features = nix-command"]
)

needs_nix = pytest.mark.skipif(
    shutil.which("nix-build") is None or not Path("/nix").is_dir(),
    reason="needs Nix (../shared/nix/install-nix.sh)",
)


@needs_nix
def test_this_run_has_a_nix_store_of_its_own():
    root = os.environ.get("EAGLE3_TESTS_NIX_STORE")
    if not root:
        why = "pytest was not started by tests/run (tests/support/fresh-nix-store), or no mount namespace could be made"
        if harness_env.get(harness_env.REQUIRE_FLAKE_EVAL) == "1":
            pytest.fail(f"the Nix tests ran on the machine's own store: {why}")
        pytest.skip(why)
    # /nix is the run's own directory (bound in the run's mount namespace), not the machine's.
    assert os.path.samestat(os.stat("/nix"), os.stat(root)), f"/nix is not {root}"
    assert Path(root).name.startswith("eagle3-nix-store."), root


def fixed_output(tmp_path: Path, content: bytes) -> Path:
    """A fixed-output derivation of `content` whose builder cannot run: like a fetcher without its
    download tool, it calls curl with nothing on PATH."""
    digest = hashlib.sha256(content).hexdigest()
    expr = tmp_path / "fetch.nix"
    expr.write_text(f"""
      derivation {{
        name = "README.md";
        system = builtins.currentSystem;
        builder = "/bin/sh";
        args = [ "-c" "curl --fail --output $out http://127.0.0.1:9/README.md" ];
        PATH = "/var/empty";
        outputHashMode = "flat";
        outputHashAlgo = "sha256";
        outputHash = "{digest}";
      }}
    """)
    return expr


def in_fresh_store(script: str, tmp_path: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "NIX_CONFIG": NIX_CONFIG, "HOME": str(tmp_path / "home")}
    return subprocess.run([str(HELPER), "sh", "-c", script], env=env, capture_output=True, text=True, timeout=300)


@needs_nix
def test_a_fixed_output_left_in_the_store_hides_a_builder_that_cannot_run_and_a_fresh_store_does_not(tmp_path):
    content = b"# tiny model\n"
    readme = tmp_path / "README.md"
    readme.write_bytes(content)
    expr = fixed_output(tmp_path, content)

    # A warm store: the file is there from "an earlier run", and the build passes without running its builder.
    warm = in_fresh_store(
        f"nix-store --add-fixed sha256 {readme} >/dev/null && nix-build --no-out-link {expr}", tmp_path
    )
    assert warm.returncode == 0, warm.stderr[-3000:]
    out = warm.stdout.strip()
    assert out.startswith("/nix/store/") and out.endswith("-README.md"), warm.stdout
    assert "building" not in warm.stderr, warm.stderr

    # What tests/run gives every run: an empty store, where the builder runs and fails as on a fresh machine.
    cold = in_fresh_store(f"nix-build --no-out-link {expr}", tmp_path)
    assert cold.returncode != 0, cold.stdout
    assert "curl: not found" in cold.stderr, cold.stderr[-3000:]
    assert out not in cold.stdout

    # Neither store reached this run's own /nix/store.
    assert not Path(out).exists()


def test_this_run_has_a_tvm_ffi_cache_of_its_own():
    """tests/conftest.py: tvm-ffi compiles its torch addon (about 23 CPU-seconds) into a directory this run made
    and removes when it ends, shared by its workers; never ~/.cache/tvm-ffi, where an earlier run's addon would
    spare a test the compile a fresh machine does."""
    cache = Path(os.environ["TVM_FFI_CACHE_DIR"])
    assert cache.is_dir() and cache.parent == Path(tempfile.gettempdir()), cache
    assert cache.name.startswith("eagle3-tests-tvm-ffi-") and cache != Path("~/.cache/tvm-ffi").expanduser()
