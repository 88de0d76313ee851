"""Sweep speculative settings: for each point start the server through the launcher, measure, stop.

The baseline (no speculation) is measured first; every point is compared with it.
Results are written as they come: all request records in one JSON Lines file, and a
summary line per point, so an interrupted sweep keeps what it measured.
"""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from .. import launch_plan, launcher
from ..settings import ServerSettings, describe
from . import BenchError, report
from .runner import RunConfig, run


@dataclass
class Point:
    label: str
    settings: ServerSettings
    median_tok_s: float | None = None
    error: str | None = None


def grid(base: ServerSettings, steps: list[int], topks: list[int], draft_tokens: list[int] | None) -> list[Point]:
    """Baseline first, then every valid (steps, top-k, draft tokens); top-k 1 forces draft = steps + 1."""
    points = [Point("baseline", base.model_copy(update={"speculative_algorithm": None}))]
    seen = set()
    for s, k in itertools.product(steps, topks):
        for d in [s + 1] if k == 1 or not draft_tokens else draft_tokens:
            if (s, k, d) in seen:
                continue
            seen.add((s, k, d))
            values = base.model_dump() | {
                "speculative_algorithm": base.speculative_algorithm or "EAGLE3",
                "speculative_num_steps": s, "speculative_eagle_topk": k, "speculative_num_draft_tokens": d,
            }  # fmt: skip
            try:
                points.append(Point(f"steps{s}-topk{k}-draft{d}", ServerSettings(**values)))
            except ValidationError as err:  # an impossible combination: reported, not run
                reason = describe(err).removeprefix("invalid settings:").strip()
                points.append(Point(f"steps{s}-topk{k}-draft{d}", base, error=reason))
    return points


def sweep(points: list[Point], template: RunConfig, out_dir: Path, log=print, on_result=lambda r: None) -> list[Point]:
    out_dir.mkdir(parents=True, exist_ok=True)
    results, summary = out_dir / "sweep.jsonl", out_dir / "sweep-summary.jsonl"
    for point in points:
        if point.error:
            log(f"{point.label}: skipped ({point.error})")
        else:
            url = launch_plan.base_url(point.settings)
            config = RunConfig(**{**template.__dict__, "url": url, "label": point.label, "output": results})
            log(f"{point.label}: starting the server")
            try:
                s = point.settings
                plan, health = launch_plan.build(s), launch_plan.health_url(s)
                with launcher.running(plan, health, s.ready_timeout, s.stop_timeout, interval=0.5):
                    outcome = run(config, on_result=on_result)
                if outcome.interrupted:
                    log("interrupted: the points measured so far are kept")
                    break
                point.median_tok_s = _median(results, point.label)
                log(f"{point.label}: median single-stream decode {point.median_tok_s or 0:.1f} tok/s")
            except (launcher.NotReady, BenchError) as err:
                point.error = str(err)
                log(f"{point.label}: failed ({err})")
        with summary.open("a") as f:
            f.write(json.dumps({"label": point.label, "median_tok_s": point.median_tok_s, "error": point.error,
                                "settings": point.settings.model_dump(mode="json")}) + "\n")  # fmt: skip
    return points


def _median(results: Path, label: str) -> float | None:
    records = [r for r in report.load(results) if r.get("label") == label]
    try:
        return report.single_stream_median(records, label)
    except BenchError:
        return None


def best(points: list[Point]) -> tuple[Point | None, float | None]:
    """The fastest speculative point and its gain over the baseline."""
    baseline = next((p for p in points if p.label == "baseline"), None)
    measured = [p for p in points if p.label != "baseline" and p.median_tok_s]
    if not measured:
        return None, None
    top = max(measured, key=lambda p: p.median_tok_s)
    gain = top.median_tok_s / baseline.median_tok_s if baseline and baseline.median_tok_s else None
    return top, gain
