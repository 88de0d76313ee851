"""The quick tier (`tests/run --quick`): it leaves out exactly the tests tests/slow-tests.txt names.

The list is kept by hand from measurements (benchmarks/suite_time.py --slowest); these tests keep it
true: each name is a test function of the suite, and the tier selects every other test and none of
them. How long the tier takes is a benchmark's figure (suite_time.py --quick), not a test.
"""

from __future__ import annotations

import ast
import re
import subprocess
from pathlib import Path

from conftest import REPO, file_seconds, slow_tests

TESTS = REPO / "tests"


def suite_functions() -> set[str]:
    """``file.py::function`` of every module-level test function of the suite, read with ast."""
    names = set()
    for path in TESTS.glob("test_*.py"):
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name.startswith("test_"):
                names.add(f"{path.name}::{node.name}")
    return names


def test_each_slow_name_is_a_test_function_of_the_suite():
    unknown = sorted(slow_tests() - suite_functions())
    assert not unknown, f"tests/slow-tests.txt names no test function: {unknown}; remove or correct the lines"


def collected_ids(*args: str) -> list[str]:
    """The test ids tests/run collects with these arguments, in its order (one process, nothing run)."""
    out = subprocess.run(
        [str(TESTS / "run"), "-n", "0", "--co", "-q", *args], capture_output=True, text=True, cwd=REPO, timeout=600
    )
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    return [line for line in out.stdout.splitlines() if "::" in line]


def collected(*args: str) -> set[str]:
    """The test functions tests/run collects with these arguments."""
    ids = collected_ids(*args)
    return {re.sub(r"\[.*\]$", "", line.removeprefix("tests/")) for line in ids}


def test_the_quick_tier_leaves_out_the_named_tests_and_only_those():
    # Two files: one with slow tests and quick ones, one with none named.
    files = ["tests/test_bad_input.py", "tests/test_settings.py"]
    everything, quick = collected(*files), collected("--quick", *files)
    named = slow_tests() & everything
    assert named, "the sample files hold named slow tests"
    assert quick == everything - named


def test_the_files_go_out_longest_first_each_in_one_piece():
    """tests/run hands the files to the workers in the collected order: the longest by tests/slow-tests.txt's
    figures first, each file's tests together and in their own order. Named shortest first here."""
    files = ["tests/test_settings.py", "tests/test_bad_input.py", "tests/test_router_discovery.py"]
    seconds = file_seconds()
    assert len({seconds.get(Path(f).name, 0.0) for f in files}) == 3, "three files the figures tell apart"
    ids = collected_ids(*files)
    in_files = [i.split("::")[0] for i in ids]
    assert set(in_files) == set(files), "tests/run runs the files it is given, not the whole suite"
    order = list(dict.fromkeys(in_files))
    assert order == sorted(files, key=lambda f: -seconds.get(Path(f).name, 0.0))
    for f in files:  # each file in one piece, its tests in the order pytest collects the file alone in
        assert ids[in_files.index(f) : in_files.index(f) + in_files.count(f)] == collected_ids(f)
