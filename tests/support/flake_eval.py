"""Evaluate this project's flake as `nix flake check` does, on a machine without nixpkgs.

The flake's locked inputs are used as they are: uv2nix, pyproject.nix and
build-system-pkgs from exact copies of their trees, staged as `<name>-<rev>.tar.gz` in
$EAGLE3_TESTS_NIX_INPUTS (default ~/.cache/sglang-eagle3/nix-inputs) by
../shared/nix/stage-inputs.sh; their `nix hash path` must equal the narHash in flake.lock,
which Nix checks. Nothing is staged in the repository: with network, Nix fetches the
inputs itself and none of this is needed. nixpkgs, which cannot be had here, is replaced by
tests/nix/nixpkgs: nixpkgs' real `lib` (from the same folder) plus a small package set
and NixOS stand-in that mirror the real functions (each file names what it mirrors).

A Workspace is a temporary copy of the repository's files (what git tracks, plus new
files not ignored) whose flake.lock points at those local trees, so plain
`nix flake check path:...` runs with no override and no warning of the harness's own.
Needs Nix >= 2.18 (nixpkgs' lib/minver.nix): ../shared/nix/install-nix.sh gives 2.26.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
from functools import cached_property
from pathlib import Path

try:
    from support import harness_env
except ImportError:  # run as a script (.ci/run): support/ is this file's own directory
    import harness_env

REPO = Path(__file__).resolve().parents[2]
STANDIN = REPO / "tests" / "nix" / "nixpkgs"
DEFAULT_INPUTS = Path.home() / ".cache" / "sglang-eagle3" / "nix-inputs"
INPUTS = Path(harness_env.get(harness_env.NIX_INPUTS) or DEFAULT_INPUTS)
# flake.lock node -> prefix of its tarball in INPUTS (the prefix is followed by the locked rev)
TARBALLS = {
    "uv2nix": "uv2nix-",
    "pyproject-nix": "pyproject.nix-",
    "pyproject-build-systems": "build-system-pkgs-",
}
# nixpkgs' lib: the nixpkgs.lib mirror's last commit not newer than the locked nixpkgs, so the
# tarball's rev is not in flake.lock; the newest staged one is used.
NIXPKGS_LIB = "nixpkgs.lib-"
HOW_TO_STAGE = (
    "fetch the mirrors of pyproject-nix/uv2nix, pyproject-nix/pyproject.nix, pyproject-nix/build-system-pkgs "
    "and nix-community/nixpkgs.lib, then run ../shared/nix/stage-inputs.sh MIRRORS "
    "(README, 'The two commands'; with network, `nix flake check` fetches the inputs itself)"
)
# .ci/run sets this: there, a missing Nix or missing inputs is a failure, not a skip.
REQUIRED = harness_env.get(harness_env.REQUIRE_FLAKE_EVAL) == "1"


def nix_version(nix: str) -> tuple[int, int] | None:
    try:
        out = subprocess.run([nix, "--version"], capture_output=True, text=True, timeout=30).stdout
    except OSError:
        return None
    match = re.search(r"(\d+)\.(\d+)", out)
    return (int(match.group(1)), int(match.group(2))) if match else None


def unavailable() -> str | None:
    """Why the flake cannot be evaluated here, or None."""
    nix = shutil.which("nix")
    if nix is None or (nix_version(nix) or (0, 0)) < (2, 18):
        return "needs Nix >= 2.18 on PATH (run ../shared/nix/install-nix.sh)"
    missing = [path.name for path in staged_tarballs().values() if not path.is_file()]
    if missing:
        return f"the flake's locked inputs are not staged in {INPUTS} (missing {', '.join(missing)}): {HOW_TO_STAGE}"
    return None


def needs_flake_eval():
    """The mark for tests that evaluate the flake: a skip, saying why and how to stage the inputs, where it
    cannot be evaluated; where .ci/run requires it (EAGLE3_TESTS_REQUIRE_FLAKE_EVAL), an error at collection."""
    import pytest  # only the tests need it; .ci/run also runs this file as a script

    reason = unavailable()
    if reason and REQUIRED:
        raise RuntimeError(f"EAGLE3_TESTS_REQUIRE_FLAKE_EVAL is set, but the flake cannot be evaluated: {reason}")
    return pytest.mark.skipif(reason is not None, reason=reason or "")


def locked_rev(node: str) -> str:
    return json.loads((REPO / "flake.lock").read_text())["nodes"][node]["locked"]["rev"]


def staged_tarballs() -> dict[str, Path]:
    """flake.lock node (and "nixpkgs.lib") -> the tarball staged for it (which may not exist)."""
    tarballs = {node: INPUTS / f"{prefix}{locked_rev(node)}.tar.gz" for node, prefix in TARBALLS.items()}
    libs = sorted(INPUTS.glob(f"{NIXPKGS_LIB}*.tar.gz"), key=lambda p: p.stat().st_mtime) if INPUTS.is_dir() else []
    tarballs["nixpkgs.lib"] = libs[-1] if libs else INPUTS / f"{NIXPKGS_LIB}<commit>.tar.gz"
    return tarballs


def tracked_files(repo: Path = REPO) -> list[str]:
    """The repository's files as a clean clone would have them, plus new files not ignored."""
    out = subprocess.run(
        ["git", "-C", str(repo), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        capture_output=True, check=True,
    ).stdout  # fmt: skip
    return [name for name in out.decode().split("\0") if name and (repo / name).exists()]


def input_tree(node: str) -> Path | None:
    """A staged input tree ("nixpkgs.lib", "uv2nix", ...) unpacked once into the test cache, or None."""
    tarball = staged_tarballs()[node]
    if not tarball.is_file():
        return None
    cache = Path(harness_env.get(harness_env.CACHE) or Path.home() / ".cache" / "sglang-eagle3-tests")
    target = cache / "inputs" / tarball.name.removesuffix(".tar.gz")
    if not target.is_dir():
        # Test workers (pytest-xdist) may unpack at once: each into its own folder, the first rename wins.
        staging = target.with_name(f"{target.name}.partial-{os.getpid()}")
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(parents=True)
        _extract(tarball, staging)
        try:
            staging.rename(target)
        except OSError:
            shutil.rmtree(staging)
    (top,) = [p for p in target.iterdir() if p.is_dir()]
    return top


def _extract(tarball: Path, into: Path) -> Path:
    with tarfile.open(tarball) as archive:
        archive.extractall(into, filter="data")
    (top,) = [p for p in into.iterdir() if p.is_dir()]
    return top


class Workspace:
    """A copy of the repository wired to local input trees; run `nix` in it."""

    def __init__(self, root: Path, repo: Path = REPO, trace_uses: bool = False):
        self.root = root
        self.home = root / "home"
        self.home.mkdir(parents=True)
        self.inputs = self._unpack_inputs()
        self.nixpkgs = self._assemble_nixpkgs()
        if trace_uses:
            # The stand-in then prints every use the flake makes of it (tests/nix/nixpkgs/trace.nix).
            (self.nixpkgs / "trace-uses").write_text("")
        self.flake = self._copy_repo(repo)
        self._lock_to_local_trees()

    # -- assembly ------------------------------------------------------------------------

    def _unpack_inputs(self) -> dict[str, Path]:
        tarballs = staged_tarballs()
        return {node: _extract(tarballs[node], self.root / "inputs" / node) for node in TARBALLS}

    def _assemble_nixpkgs(self) -> Path:
        target = self.root / "nixpkgs"
        shutil.copytree(STANDIN, target)
        lib_tree = _extract(staged_tarballs()["nixpkgs.lib"], self.root / "inputs" / "nixpkgs.lib")
        shutil.copytree(lib_tree / "lib", target / "lib")
        # Where the stand-in's leaf packages find host programs when something is built here:
        # this test environment's own bin directory first (its python has `wheel`, its ruff),
        # then PATH.
        dirs = [str(Path(sys.executable).parent), *os.environ.get("PATH", "").split(os.pathsep)]
        host_path = list(dict.fromkeys(d for d in dirs if d))
        # The wrappers' shell by its real path: they also run inside an image's root (tests/test_image.py).
        shell = os.path.realpath(shutil.which("sh") or "/bin/sh")
        (target / "host-tools.json").write_text(json.dumps({"path": host_path, "shell": shell}))
        return target

    def _copy_repo(self, repo: Path) -> Path:
        target = self.root / "repo"
        for name in tracked_files(repo):
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(repo / name, target / name, follow_symlinks=False)
        return target

    def nar_hash(self, path: Path) -> str:
        return self.nix("hash", "path", str(path)).stdout.strip()

    def _lock_to_local_trees(self) -> None:
        lock_file = self.flake / "flake.lock"
        lock = json.loads(lock_file.read_text())
        self.original_lock = json.loads(lock_file.read_text())
        trees = {**self.inputs, "nixpkgs": self.nixpkgs}
        for node, tree in trees.items():
            locked = {"type": "path", "path": str(tree), "narHash": self.nar_hash(tree)}
            locked["lastModified"] = lock["nodes"][node]["locked"]["lastModified"]
            lock["nodes"][node]["locked"] = locked
        lock_file.write_text(json.dumps(lock, indent=2))

    # -- running Nix -----------------------------------------------------------------------

    @cached_property
    def env(self) -> dict[str, str]:
        return {
            **os.environ,
            "HOME": str(self.home),
            "XDG_CACHE_HOME": str(self.home / ".cache"),
            # As root without a daemon: no build users, no remote builders; no binary cache (no network).
            "NIX_CONFIG": "\n".join(
                ["build-users-group =", "substituters =", "build-hook =", "experimental-features = nix-command flakes"]
            ),
        }

    def nix(self, *args: str, check: bool = True, timeout: float = 900) -> subprocess.CompletedProcess:
        result = subprocess.run(
            ["nix", *args], cwd=self.flake, env=self.env, capture_output=True, text=True, timeout=timeout
        )
        if check and result.returncode != 0:
            raise AssertionError(f"nix {' '.join(args)} failed:\n{result.stderr[-6000:]}")
        return result

    @property
    def ref(self) -> str:
        return f"path:{self.flake}"

    def eval(self, attribute: str, apply: str | None = None):
        """`nix eval --json path:<flake>#<attribute>`, optionally through --apply."""
        args = ["eval", "--json", f"{self.ref}#{attribute}"]
        if apply:
            args += ["--apply", apply]
        return json.loads(self.nix(*args).stdout)

    def eval_expr(self, expr: str):
        """A Nix expression with `flake` (the flake's outputs) and `inputs` in scope."""
        full = f'let flake = builtins.getFlake "{self.ref}"; inputs = flake.inputs; in {expr}'
        return json.loads(self.nix("eval", "--json", "--impure", "--expr", full).stdout)


if __name__ == "__main__":
    # .ci/run asks whether the flake can be evaluated here: exit 0, or print why not and exit 1.
    why = unavailable()
    if why:
        print(why)
    sys.exit(1 if why else 0)
