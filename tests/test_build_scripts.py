"""The build steps of the flake, run outside Nix on inputs named the way the store names them.

Each non-trivial step of a derivation is a script in nix/scripts/ that the derivation calls
(tests/test_flake.py checks the call); here the same scripts run on the real inputs.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import os
import shutil
import stat
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from conftest import REPO, SERIES_DIR, series_names
from sglang_eagle3.trees import patchset
from support import pins

SCRIPTS = REPO / "nix" / "scripts"
# A store path's name: 32 characters of Nix's base-32 alphabet, a dash, the name.
STORE_PREFIX = "0c5b8vw40dy178xlpddw65q9gf1h2186-"
needs_patch = pytest.mark.skipif(shutil.which("patch") is None, reason="needs GNU patch")


def tool_path() -> str:
    """This test environment's programs (python with `wheel`, ruff) first, as the derivation's inputs are."""
    return os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]])


def run_patch_wheel(wheel: Path, out: Path, *patches: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PATH": tool_path(), "PATCH_FLAGS": " ".join(patchset.PATCH_FLAGS)}
    command = ["bash", str(SCRIPTS / "patch-wheel.sh"), str(wheel), pins.pins()["sglang"]["wheel"], str(out)]
    return subprocess.run([*command, *map(str, patches)], capture_output=True, text=True, env=env)


def wheel_files(wheel: Path) -> dict[str, bytes]:
    with zipfile.ZipFile(wheel) as archive:
        return {name: archive.read(name) for name in archive.namelist() if not name.endswith("/")}


@pytest.fixture(scope="module")
def store_named_wheel(pristine_wheel, tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("store") / f"{STORE_PREFIX}{pins.pins()['sglang']['wheel']}"
    shutil.copy(pristine_wheel, path)
    return path


@needs_patch
def test_patched_wheel_is_pristine_plus_the_series(store_named_wheel, pristine_wheel, patched_tree, tmp_path):
    result = run_patch_wheel(store_named_wheel, tmp_path / "out", *(SERIES_DIR / n for n in series_names()))
    assert result.returncode == 0, result.stdout + result.stderr
    (wheel,) = (tmp_path / "out").iterdir()
    assert wheel.name == pins.pins()["sglang"]["wheel"]

    built, pristine = wheel_files(wheel), wheel_files(pristine_wheel)
    record = next(n for n in built if n.endswith(".dist-info/RECORD"))
    assert set(built) == set(pristine), "the same files, no more, no fewer"
    touched = {f for name in series_names() for f in patchset.Patch(name, SERIES_DIR / name).files}
    for name, content in built.items():
        if name == record:
            continue
        if name in touched:
            assert content == (patched_tree / name).read_bytes(), f"{name} is not pristine + the series"
            assert content != pristine[name], f"{name} was not patched"
        else:
            assert content == pristine[name], f"{name} changed, but no patch touches it"
    # RECORD was regenerated: every entry's hash and size is that of the file in the wheel.
    for path, digest, size in csv.reader(io.StringIO(built[record].decode())):
        if path == record:
            continue
        algorithm, _, value = digest.partition("=")
        actual = base64.urlsafe_b64encode(hashlib.new(algorithm, built[path]).digest()).rstrip(b"=").decode()
        assert (actual, int(size)) == (value, len(built[path])), path


@needs_patch
def test_a_patch_that_does_not_apply_fails_the_build(store_named_wheel, tmp_path):
    first = SERIES_DIR / series_names()[0]
    result = run_patch_wheel(store_named_wheel, tmp_path / "out", first, first)  # applied twice: a conflict
    assert result.returncode != 0
    assert not (tmp_path / "out").exists() or not list((tmp_path / "out").iterdir())


def test_patch_wheel_rejects_a_bad_wheel_name(store_named_wheel, tmp_path):
    env = {**os.environ, "PATH": tool_path()}
    for bad in ("../evil.whl", "sglang.tar.gz", ""):
        result = subprocess.run(["bash", str(SCRIPTS / "patch-wheel.sh"), str(store_named_wheel), bad, str(tmp_path)],
                                capture_output=True, text=True, env=env)  # fmt: skip
        assert result.returncode == 2 and "not a wheel file name" in result.stderr, bad


@pytest.mark.skipif(shutil.which("nix-store") is None, reason="needs Nix (nix-store, nix-instantiate)")
def test_formatting_check_runs_on_a_read_only_source(tmp_path):
    source = tmp_path / "source"
    for name in subprocess.run(["git", "-C", str(REPO), "ls-files", "--cached", "--others", "--exclude-standard"],
                               capture_output=True, text=True, check=True).stdout.split():  # fmt: skip
        if (REPO / name).is_file():
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(REPO / name, source / name)
    for path in [source, *source.rglob("*")]:
        path.chmod(path.stat().st_mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))
    env = {**os.environ, "PATH": tool_path(), "TMPDIR": str(tmp_path)}
    check = ["bash", str(SCRIPTS / "check-formatting.sh"), str(source)]
    try:
        result = subprocess.run(check, capture_output=True, text=True, env=env)
        assert result.returncode == 0, result.stdout + result.stderr
        assert "formatting: ok" in result.stdout
        # A badly formatted file is found.
        victim = source / "python" / "src" / "sglang_eagle3" / "__init__.py"
        victim.chmod(0o644)
        victim.write_text(victim.read_text() + "x  =  1\n")
        result = subprocess.run(check, capture_output=True, text=True, env=env)
        assert result.returncode != 0 and "__init__.py" in result.stdout + result.stderr
    finally:
        for path in [source, *source.rglob("*")]:
            path.chmod(path.stat().st_mode | stat.S_IWUSR)


@needs_patch
def test_patched_0_5_23_wheel_is_its_pristine_wheel_plus_its_series(newest_wheel, tmp_path):
    """The second stack's build step (packages.sglang-wheel-0_5_23) on the real 0.5.23 wheel:
    patches/sglang-0.5.23/series applied with no fuzz, every other file unchanged."""
    pin = pins.pins()[pins.pins()["stacks"]["0.5.23"]["sglang"]]
    store_named = tmp_path / f"{STORE_PREFIX}{pin['wheel']}"
    shutil.copy(newest_wheel, store_named)
    series_dir = REPO / "patches" / "sglang-0.5.23"
    names = patchset.read_series(series_dir / "series")
    env = {**os.environ, "PATH": tool_path(), "PATCH_FLAGS": " ".join(patchset.PATCH_FLAGS)}
    command = ["bash", str(SCRIPTS / "patch-wheel.sh"), str(store_named), pin["wheel"], str(tmp_path / "out")]
    result = subprocess.run([*command, *(str(series_dir / n) for n in names)], capture_output=True, text=True, env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    (wheel,) = (tmp_path / "out").iterdir()
    assert wheel.name == pin["wheel"]
    built, pristine = wheel_files(wheel), wheel_files(newest_wheel)
    assert set(built) == set(pristine), "the same files, no more, no fewer"
    touched = {f for name in names for f in patchset.Patch(name, series_dir / name).files}
    unpacked = tmp_path / "expected"
    unpacked.mkdir()
    with zipfile.ZipFile(newest_wheel) as archive:
        archive.extractall(unpacked, members=sorted(touched))
    for name in names:
        applied = subprocess.run(["patch", *patchset.PATCH_FLAGS, "-d", str(unpacked), "-i", str(series_dir / name)],
                                 capture_output=True, text=True)  # fmt: skip
        assert applied.returncode == 0, applied.stdout + applied.stderr
    for name, content in built.items():
        if name.endswith(".dist-info/RECORD"):
            continue
        expected = (unpacked / name).read_bytes() if name in touched else pristine[name]
        assert content == expected, f"{name} is not the pristine wheel plus the series"


# -- image-root.sh: the image's own files (nix/image.nix's extraCommands) -------------------------------------


def test_image_root_writes_the_user_ldconfig_links_and_writable_directories(tmp_path):
    programs = tmp_path / "store-bin"
    programs.mkdir()
    for name in ("bash", "awk"):
        (programs / name).write_text("#!/bin/false\n")
    server = tmp_path / "sglang-eagle3"
    server.write_text("#!/bin/false\n")
    root = tmp_path / "root"
    root.mkdir()
    command = ["bash", str(SCRIPTS / "image-root.sh"), "1000", "/var/lib/sglang-eagle3", "/glibc/bin/ldconfig",
               "/var/lib/sglang-eagle3,/var/cache/sglang-eagle3", "--", str(programs), str(server)]  # fmt: skip
    subprocess.run(command, cwd=root, check=True)
    assert "sglang:x:1000:1000:sglang-eagle3:/var/lib/sglang-eagle3:/bin/false" in (root / "etc/passwd").read_text()
    assert "sglang:x:1000:" in (root / "etc/group").read_text()
    assert os.readlink(root / "sbin/ldconfig") == "/glibc/bin/ldconfig" and (root / "etc/ld.so.conf.d").is_dir()
    assert {p.name: os.readlink(p) for p in (root / "bin").iterdir()} == {
        "bash": str(programs / "bash"), "awk": str(programs / "awk"), "sh": "bash", "sglang-eagle3": str(server),
    }  # fmt: skip
    for directory in ("tmp", "var/lib/sglang-eagle3", "var/cache/sglang-eagle3"):
        assert (root / directory).stat().st_mode & 0o7777 == 0o1777, directory
    assert (root / "etc/sglang-eagle3").is_dir() and (root / "run").is_dir(), "mount points"


def test_image_root_refuses_a_call_without_its_separator(tmp_path):
    result = subprocess.run(["bash", str(SCRIPTS / "image-root.sh"), "1000", "/home", "/ldconfig", "/var/x", "/bin"],
                            cwd=tmp_path, capture_output=True, text=True)  # fmt: skip
    assert result.returncode == 2 and "expected -- after WRITABLE_DIRS" in result.stderr
