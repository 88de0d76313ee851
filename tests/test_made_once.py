"""conftest.made_once: the session trees are made once a run and shared by pytest-xdist's workers.

Real processes race for it here, as the workers do: each is given the run's layout (its own base directory under the
run's, PYTEST_XDIST_WORKER set) and the same make, which counts its calls in a file.
"""

from __future__ import annotations

import multiprocessing
import os
from pathlib import Path

import pytest
from conftest import made_once


class _Factory:
    """What made_once uses of pytest's tmp_path_factory: the worker's base directory."""

    def __init__(self, base: Path):
        self.base = base

    def getbasetemp(self) -> Path:
        return self.base


def _make(directory: Path) -> None:
    calls = directory.parent / "calls"
    with calls.open("a") as f:
        f.write("made\n")
    if os.environ.get("FAIL_ONCE") and calls.read_text().count("made") == 1:
        (directory / "half").write_text("cut short")
        raise RuntimeError("the first make fails")
    (directory / "tree").write_text("whole")


def _worker(run: str, index: int, results) -> None:
    os.environ["PYTEST_XDIST_WORKER"] = f"gw{index}"
    base = Path(run) / f"popen-gw{index}"
    base.mkdir()
    try:
        results.put(str(made_once(_Factory(base), "tree", _make)))
    except RuntimeError as err:
        results.put(f"error: {err}")


def _race(run: Path, workers: int) -> list[str]:
    results = multiprocessing.get_context("fork").Queue()
    processes = [multiprocessing.get_context("fork").Process(target=_worker, args=(str(run), i, results))
                 for i in range(workers)]  # fmt: skip
    for p in processes:
        p.start()
    for p in processes:
        p.join(60)
    return sorted(results.get(timeout=5) for _ in processes)


def test_four_workers_share_one_directory_made_once(tmp_path):
    outcomes = _race(tmp_path, 4)
    assert outcomes == [str(tmp_path / "shared-tree")] * 4
    assert (tmp_path / "calls").read_text() == "made\n"
    assert (tmp_path / "shared-tree" / "tree").read_text() == "whole"


def test_a_make_that_failed_is_started_again_from_an_empty_directory(tmp_path, monkeypatch):
    monkeypatch.setenv("FAIL_ONCE", "1")
    outcomes = _race(tmp_path, 3)
    assert outcomes == sorted(["error: the first make fails"] + [str(tmp_path / "shared-tree")] * 2)
    assert (tmp_path / "calls").read_text() == "made\n" * 2
    assert sorted(p.name for p in (tmp_path / "shared-tree").iterdir()) == ["tree"]  # the half-made file is gone


def test_outside_pytest_xdist_the_directory_is_the_sessions_own(tmp_path, monkeypatch):
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    session = tmp_path / "session"
    session.mkdir()
    assert made_once(_Factory(session), "tree", _make) == session / "shared-tree"
    with pytest.raises(FileNotFoundError):
        (tmp_path / "shared-tree").stat()
