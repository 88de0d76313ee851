"""Sweep speculative settings and drafts: for each point start the server through the launcher, measure, stop.

The baseline (no speculation) is measured first; every point is compared with it. A
point is one draft with one (steps, top-k, draft tokens); several drafts are swept over
the same grid so a team can choose the draft on its own hardware. Results are written as
they come: all request records in one JSON Lines file, and a summary line per point, so
an interrupted sweep keeps what it measured.
"""

from __future__ import annotations

import itertools
import json
import statistics
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from .. import redaction
from ..serving import launch_plan, launcher
from ..serving.settings import ServerSettings, default, describe
from . import BenchError, report
from .runner import RunConfig, run


@dataclass
class Point:
    label: str
    settings: ServerSettings
    draft: str | None = None  # short name of the draft (None: the baseline)
    shape: tuple[int, int, int] | None = None  # (steps, top-k, draft tokens)
    median_tok_s: float | None = None
    accept_length: float | None = None  # median over single-stream requests (or the server's average)
    error: str | None = None


def draft_names(drafts: list[str]) -> dict[str, str]:
    """Short, unique names for draft paths or hub ids: the last path part, numbered if two are alike."""
    names: dict[str, str] = {}
    for draft in drafts:
        name = draft.rstrip("/").rsplit("/", 1)[-1] or draft
        while name in names.values():
            name = f"{name}-{len(names) + 1}"
        names[draft] = name
    return names


def grid(
    base: ServerSettings,
    steps: list[int],
    topks: list[int],
    draft_tokens: list[int] | None,
    drafts: list[str] | None = None,
) -> list[Point]:
    """Baseline first, then every draft x valid (steps, top-k, draft tokens); top-k 1 forces draft = steps + 1."""
    points = [Point("baseline", base.model_copy(update={"speculative_algorithm": None}))]
    drafts = drafts or [base.speculative_draft_model_path]
    names = draft_names(drafts)
    for draft in drafts:
        seen = set()
        for s, k in itertools.product(steps, topks):
            for d in [s + 1] if k == 1 or not draft_tokens else draft_tokens:
                if (s, k, d) in seen:
                    continue
                seen.add((s, k, d))
                label = f"steps{s}-topk{k}-draft{d}"
                label = label if len(drafts) == 1 else f"{names[draft]}/{label}"
                values = base.model_dump() | {
                    "speculative_algorithm": base.speculative_algorithm or default("speculative_algorithm"),
                    "speculative_draft_model_path": draft,
                    "speculative_num_steps": s, "speculative_eagle_topk": k, "speculative_num_draft_tokens": d,
                }  # fmt: skip
                point = Point(label, base, draft=names[draft], shape=(s, k, d))
                try:
                    point.settings = ServerSettings(**values)
                except ValidationError as err:  # an impossible combination: reported, not run
                    point.error = describe(err).removeprefix("invalid settings:").strip()
                points.append(point)
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
                plan = launch_plan.build(s)
                with launcher.running(plan, plan.health_url, s.ready_timeout, s.stop_timeout, interval=0.5):
                    outcome = run(config, on_result=on_result)
                if outcome.interrupted:
                    log("interrupted: the points measured so far are kept")
                    break
                point.median_tok_s, point.accept_length = _medians(results, outcome.run_id, point.label)
                accept = f", accept length {point.accept_length:.2f}" if point.accept_length else ""
                log(f"{point.label}: median single-stream decode {point.median_tok_s or 0:.1f} tok/s{accept}")
            except (launcher.NotReady, BenchError) as err:
                point.error = str(err)
                log(f"{point.label}: failed ({err})")
        line = {"label": point.label, "draft": point.draft, "shape": point.shape, "median_tok_s": point.median_tok_s,
                "accept_length": point.accept_length, "error": point.error,
                "settings": _shown_settings(point.settings)}  # fmt: skip
        with summary.open("a") as f:
            f.write(json.dumps(line) + "\n")
    return points


def _shown_settings(settings) -> dict:
    """A point's settings as the summary file keeps them: secrets masked, as `settings show` shows them."""
    data = settings.model_dump(mode="json")
    data["environment"] = redaction.masked_env(data["environment"])
    return redaction.hide_values(data)


def _medians(results: Path, run_id: str, label: str) -> tuple[float | None, float | None]:
    """Median single-stream decode tok/s and accept length of one point: its run (the file may hold earlier ones)."""
    records = report.runs(report.load(results)).get(run_id, [])
    try:
        tok_s = report.single_stream_median(records, label)
    except BenchError:
        tok_s = None
    accepts = [r["spec_accept_length"] for r in records if r["type"] == "request" and r.get("ok")
               and r["concurrency"] == 1 and isinstance(r.get("spec_accept_length"), (int, float))]  # fmt: skip
    server = [r.get("avg_spec_accept_length") for r in records if r["type"] == "server_info"]
    accept = statistics.median(accepts) if accepts else next((a for a in server if a), None)
    return tok_s, accept


def best(points: list[Point], draft: str | None = None) -> tuple[Point | None, float | None]:
    """The fastest speculative point (of one draft, if given) and its gain over the baseline."""
    baseline = next((p for p in points if p.label == "baseline"), None)
    measured = [p for p in points if p.draft and p.median_tok_s and draft in (None, p.draft)]
    if not measured:
        return None, None
    top = max(measured, key=lambda p: p.median_tok_s)
    gain = top.median_tok_s / baseline.median_tok_s if baseline and baseline.median_tok_s else None
    return top, gain


def render_table(points: list[Point]) -> str:
    lines = [f"{'draft':<24} {'steps':>5} {'topk':>4} {'tokens':>6} {'tok/s':>8} {'accept':>7}"]
    for p in points:
        s, k, d = p.shape or ("-", "-", "-")
        tok_s = f"{p.median_tok_s:8.1f}" if p.median_tok_s else f"{'-':>8}"
        accept = f"{p.accept_length:7.2f}" if p.accept_length else f"{'-':>7}"
        note = f"  ({p.error})" if p.error else ""
        lines.append(f"{p.draft or '(baseline)':<24} {s:>5} {k:>4} {d:>6} {tok_s} {accept}{note}")
    return "\n".join(lines)


def plot(points: list[Point], path: Path) -> Path:
    """PNG: decode tok/s and accept length per (steps, top-k, draft tokens), the drafts' bars side by side."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shapes = sorted({p.shape for p in points if p.shape})
    drafts = list(dict.fromkeys(p.draft for p in points if p.draft))
    width = 0.8 / max(1, len(drafts))
    fig, (speed, accept) = plt.subplots(2, 1, figsize=(max(7, 1.3 * len(shapes) * max(1, len(drafts))), 7.5))
    for i, draft in enumerate(drafts):
        xs = [j + (i - (len(drafts) - 1) / 2) * width for j in range(len(shapes))]
        tok_s, accept_length = _bar_heights(points, draft, shapes)
        speed.bar(xs, tok_s, width, label=draft)
        accept.bar(xs, accept_length, width, label=draft)
    baseline = next((p for p in points if p.label == "baseline" and p.median_tok_s), None)
    if baseline:
        speed.axhline(
            baseline.median_tok_s, color="grey", linestyle="--", label=f"baseline {baseline.median_tok_s:.1f}"
        )
    ticks = [f"steps {s}\ntop-k {k}\ntokens {d}" for s, k, d in shapes]
    for axis, ylabel in ((speed, "decode tok/s (median, single stream)"), (accept, "accept length (median)")):
        axis.set_xticks(range(len(shapes)), ticks, fontsize=8)
        axis.set_ylabel(ylabel)
        axis.legend(fontsize=8)
    speed.set_title("Speculative settings by draft")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def _bar_heights(points: list[Point], draft: str, shapes: list[tuple[int, int, int]]) -> tuple[list, list]:
    """A draft's median decode tok/s and accept length at each shape; 0 where it has no figure there."""
    mine = {p.shape: p for p in points if p.draft == draft}
    at = [mine.get(s) for s in shapes]
    return [(p.median_tok_s or 0) if p else 0 for p in at], [(p.accept_length or 0) if p else 0 for p in at]
