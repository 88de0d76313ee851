"""`bench ab`: two stacks on one host, served one after the other through their own `serve`, then gated.

Each "stack" here is a stand-in for a Nix stack's wrapped bin/sglang-eagle3: a shell script that
runs this checkout's CLI with its own stand-in server speed (the real stacks differ in the SGLang
they wrap, which cannot serve on CPU). Speeds are judged against what the runs measured, never
against a bound a busy machine could miss.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys

from sglang_eagle3.bench import report
from sglang_eagle3.exit_status import ExitStatus
from support.bench_fixtures import FAKE_SGLANG, free_port
from support.gpus import fake_nvidia_smi


def stand_in_stack(tmp_path, name: str, rate: int, tree, serve_first: str = "", starts_on=None) -> str:
    """bin/sglang-eagle3 of a stand-in stack: this CLI, a stand-in server at `rate` tok/s, preflight on `tree`.

    `serve_first`: shell run before a `serve` that starts (not before `serve --dry-run`, the preflight bench ab
    runs first, nor `--version`), e.g. to make the stack fail to start. `starts_on`: the tree the preflight of
    that `serve` reads (default `tree`), e.g. one it fails on after its dry run passed.
    """
    program = tmp_path / name / "bin" / "sglang-eagle3"
    program.parent.mkdir(parents=True)
    program.write_text(
        "#!/bin/sh\n"
        f"export FAKE_SGLANG_RATE={rate} FAKE_SGLANG_FIRST_DELAY=0.02\n"
        'if [ "$1" = serve ]; then\n'
        f'  case " $* " in *" --dry-run "*) tree={tree} ;; *) echo \'stack {name} serving\' >&2; {serve_first}\n'
        f"    tree={starts_on or tree} ;; esac\n"
        f'  exec {sys.executable} -m sglang_eagle3.cli "$@" --sglang "$tree"\nfi\n'
        f'exec {sys.executable} -m sglang_eagle3.cli "$@"\n'
    )
    program.chmod(program.stat().st_mode | stat.S_IXUSR)
    return str(program)


def run_ab(tmp_path, a: str, b: str, *extra: str, threshold: str = "1.0") -> subprocess.CompletedProcess:
    environment = json.dumps({"PYTHONPATH": str(FAKE_SGLANG)})
    env = {**os.environ, "SGLANG_EAGLE3_NVIDIA_SMI": fake_nvidia_smi(tmp_path, "8x-rtx-pro-6000.csv")}
    return subprocess.run(
        [sys.executable, "-m", "sglang_eagle3.cli", "bench", "ab", "--a", a, "--a-label", "sglang-0.5.9",
         "--b", b, "--b-label", "sglang-0.5.23", "--set", f"environment={environment}",
         "--set", f"port={free_port()}", "--set", "ready_timeout=120", "--threshold", threshold,
         "--requests", "2", "--warmup", "0", "--max-tokens", "48", "--output-dir", str(tmp_path / "ab"), *extra],
        capture_output=True, text=True, env=env, timeout=600,
    )  # fmt: skip


def test_ab_serves_each_stack_through_its_own_program_and_gates_b_against_a(tmp_path, patched_tree):
    a = stand_in_stack(tmp_path, "old", 60, patched_tree)
    b = stand_in_stack(tmp_path, "new", 90, patched_tree)
    result = run_ab(tmp_path, a, b)

    out = tmp_path / "ab"
    records = report.load(out / "ab.jsonl")
    medians = {label: report.single_stream_median([r for r in records if r.get("label") == label], label)
               for label in ("sglang-0.5.9", "sglang-0.5.23")}  # fmt: skip
    ratio = medians["sglang-0.5.23"] / medians["sglang-0.5.9"]
    # The verdict is the one the measurements give, and the exit status follows it.
    assert result.returncode == (ExitStatus.OK if ratio >= 1.0 else ExitStatus.CHECK_FAILED), result.stderr
    assert f"sglang-0.5.23 {medians['sglang-0.5.23']:.1f} tok/s is {ratio:.3f}x the sglang-0.5.9's" in result.stdout
    # Each side ran its own program (its own serve and preflight), one after the other, logs kept apart.
    assert "stack old serving" in (out / "sglang-0.5.9-server.log").read_text()
    assert "stack new serving" in (out / "sglang-0.5.23-server.log").read_text()
    assert "stack new" not in (out / "sglang-0.5.9-server.log").read_text()
    # Each side's preflight read the real tree, its server is the stand-in: its serve says so, plainly.
    assert (
        f"note: preflight judged SGLang 0.5.9 at {patched_tree / 'sglang'}, but the command runs the sglang at "
        in (out / "sglang-0.5.9-server.log").read_text()
    )
    starts = [i for i, line in enumerate(result.stderr.splitlines()) if ": starting " in line]
    assert len(starts) == 2 and "sglang-0.5.9: starting" in result.stderr.splitlines()[starts[0]]
    # Both sides speculate (the eagle3 profile): each side's acceptance is judged and shown.
    assert "speculation (sglang-0.5.9)" in result.stdout and "speculation (sglang-0.5.23)" in result.stdout
    assert (out / "ab.png").read_bytes()[:4] == b"\x89PNG"

    # The same measurements against a threshold just above what B delivered: the gate fails.
    stricter = report.compare(
        [r for r in records if r.get("label") == "sglang-0.5.9"],
        [r for r in records if r.get("label") == "sglang-0.5.23"],
        threshold=ratio * 1.01,
        labels=("sglang-0.5.9", "sglang-0.5.23"),
    )
    assert not stricter.passed and "below the threshold" in report.render_verdict(stricter)


def test_a_side_that_never_becomes_ready_stops_the_run_and_keeps_what_was_measured(tmp_path, patched_tree):
    a = stand_in_stack(tmp_path, "old", 60, patched_tree)
    b = stand_in_stack(tmp_path, "broken", 90, patched_tree, serve_first="echo 'no GPU for this stack' >&2; exit 3")
    result = run_ab(tmp_path, a, b)
    assert result.returncode == ExitStatus.SERVER_EXITED, result.stdout + result.stderr
    assert "sglang-0.5.23: the server exited with 3 before it was ready" in result.stderr
    assert "sglang-0.5.23-server.log" in result.stderr and "Traceback" not in result.stderr
    assert "no GPU for this stack" in (tmp_path / "ab" / "sglang-0.5.23-server.log").read_text()
    kept = report.load(tmp_path / "ab" / "ab.jsonl")
    assert any(r["type"] == "request" and r.get("label") == "sglang-0.5.9" and r.get("ok") for r in kept)


def test_bad_sides_are_refused_before_anything_starts(tmp_path, patched_tree):
    good = stand_in_stack(tmp_path, "old", 60, patched_tree)
    missing = run_ab(tmp_path, good, str(tmp_path / "nowhere" / "sglang-eagle3"))
    assert missing.returncode == ExitStatus.BAD_INPUT
    assert "--b" in missing.stderr and "is not a working sglang-eagle3 program" in missing.stderr
    assert "Traceback" not in missing.stderr and not (tmp_path / "ab").exists()

    same = subprocess.run(
        [sys.executable, "-m", "sglang_eagle3.cli", "bench", "ab", "--a", good, "--b", good, "--a-label", "x",
         "--b-label", "x"],
        capture_output=True, text=True,
    )  # fmt: skip
    assert same.returncode == ExitStatus.BAD_INPUT and "--a-label and --b-label" in same.stderr


def test_a_side_that_fails_its_preflight_stops_the_run_before_anything_starts(tmp_path, patched_tree, pristine_tree):
    """Side B on an SGLang without the patch set: its own preflight (`serve --dry-run`) fails; A is not served
    first, and the message is the preflight's findings, not a server that exited."""
    a = stand_in_stack(tmp_path, "old", 60, patched_tree)
    b = stand_in_stack(tmp_path, "unpatched", 90, pristine_tree)
    result = run_ab(tmp_path, a, b)
    assert result.returncode == ExitStatus.CHECK_FAILED, result.stdout + result.stderr
    assert "sglang-0.5.23: preflight failed; nothing was started" in result.stderr
    assert "[FAIL] probe:" in result.stderr and "get_embed_and_head" in result.stderr
    assert "exited with" not in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "ab" / "ab.jsonl").exists() and not list(tmp_path.glob("ab/*-server.log"))


def test_a_side_whose_serve_stops_at_its_preflight_says_so(tmp_path, patched_tree, pristine_tree):
    """Side A passes the preflight run first, then its serve's own preflight fails (here: it reads another tree):
    the run says the preflight failed and shows its findings, with exit status 1."""
    a = stand_in_stack(tmp_path, "old", 60, patched_tree, starts_on=pristine_tree)
    b = stand_in_stack(tmp_path, "new", 90, patched_tree)
    result = run_ab(tmp_path, a, b)
    assert result.returncode == ExitStatus.CHECK_FAILED, result.stdout + result.stderr
    assert "sglang-0.5.9: preflight failed; nothing was started" in result.stderr
    assert "[FAIL] probe:" in result.stderr and "sglang-0.5.9-server.log" in result.stderr
    assert "before it was ready" not in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "ab" / "sglang-0.5.23-server.log").exists()  # B never started


def test_a_side_program_that_is_no_command_line_is_bad_input(tmp_path):
    """An unterminated quote (or an empty program) is refused as the option it came in, before anything runs."""
    for program, option in (('unterminated "quote', "--a"), ("", "--a"), ("'", "--b")):
        result = subprocess.run(
            [sys.executable, "-m", "sglang_eagle3.cli", "bench", "ab", "--a", program if option == "--a" else "true",
             "--b", program if option == "--b" else "true", "--output-dir", str(tmp_path / "ab")],
            capture_output=True, text=True,
        )  # fmt: skip
        assert result.returncode == ExitStatus.BAD_INPUT, (program, result.stderr)
        assert f"Invalid value for {option}" in result.stderr and "Traceback" not in result.stderr
        assert "unexpected" not in result.stderr and not (tmp_path / "ab").exists()
