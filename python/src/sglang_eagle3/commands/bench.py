"""`sglang-eagle3 bench`: run, summary, compare (the A/B gate), ab, sweep."""

from __future__ import annotations

import functools
import os
import signal
import sys
from pathlib import Path

import click

from .. import errors, options
from ..cli_common import load_settings, writable_file
from ..errors import CheckFailed, Interrupted, shown
from ..exit_status import ExitStatus, for_signal
from ..judging import preflight
from ..judging.findings import Status
from ..models import draft_inputs
from ..serving import credentials, settings
from .serve import judged_or_refused


@click.group("bench")
def bench_group() -> None:
    """Measure decode throughput; gate EAGLE-3 against the baseline; sweep speculative settings."""


def _default_output(label: str) -> Path:
    import datetime as dt

    return Path("results") / f"{label}-{dt.datetime.now().strftime('%Y%m%d-%H%M%S')}.jsonl"


def _key_file(option: Path | None) -> Path | None:
    return credentials.key_file(credentials.API_KEY, option, os.environ)


def bench_options(func):
    declared = [
        click.option("--api", type=click.Choice(["native", "openai"]), default="native", show_default=True,
                     help="native: SGLang /generate; openai: /v1/chat/completions (both streamed)."),
        click.option("--concurrency", "concurrencies", type=click.IntRange(min=1), multiple=True,
                     help="Requests in flight (repeatable). Default 1."),
        click.option("--concurrency-sweep", is_flag=True, help="Concurrency 1, 2, 4, 8, 16."),
        click.option("--requests", type=click.IntRange(min=1), default=8, show_default=True,
                     help="Measured requests per concurrency level."),
        click.option("--warmup", type=click.IntRange(min=0), default=2, show_default=True,
                     help="Warm-up requests per level, not counted."),
        click.option("--max-tokens", type=click.IntRange(min=2), default=256, show_default=True,
                     help="Output tokens per request (greedy)."),
        click.option("--ignore-eos/--stop-at-eos", default=True, show_default=True,
                     help="Generate exactly --max-tokens so runs compare."),
        options.plot,
    ]  # fmt: skip
    for option in reversed(declared):
        func = option(func)
    return func


class _Progress:
    """A rich progress bar over the measured requests, showing the last request's speed."""

    def __init__(self):
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self.progress = Progress(
            TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
            TextColumn("{task.fields[last]}"), transient=False,
        )  # fmt: skip
        self.task = None

    def level(self, concurrency: int, total: int, label: str = "") -> None:
        self.task = self.progress.add_task(f"{label} concurrency {concurrency}".strip(), total=total, last="")

    def result(self, result) -> None:
        from ..bench.runner import result_summary_line

        if self.task is not None:
            self.progress.update(self.task, advance=1, last=result_summary_line(result))


def _finish(output: Path, plot: bool, run: str | None = None) -> None:
    """The summary (and plot) of a results file, or of one run of it."""
    from ..bench import report

    records = report.load(output)
    if run is not None:
        records = report.runs(records).get(run, [])
    click.echo(report.render_summary(report.summarize(records)))
    click.echo(f"results: {output}" + (f" (run {run})" if run else ""))
    if plot and any(r["type"] == "request" and r.get("ok") for r in records):
        click.echo(f"plot:    {report.plot(records, output.with_suffix('.png'))}")


def _stopped(outcome, output: Path, measuring: str = "") -> Interrupted:
    """An interrupted run, naming the results file only when the run wrote to it."""
    how = "interrupted" if outcome.signal == signal.SIGINT else f"terminated by {signal.Signals(outcome.signal).name}"
    kept = (f"{outcome.finished} finished requests are kept in {output} (run {outcome.run_id})" if outcome.written
            else "it was stopped before the first request; nothing was written")  # fmt: skip
    return Interrupted(f"{how}{measuring}: {kept}", for_signal(outcome.signal))


@bench_group.command("run")
@click.option("--url", required=True, help="Server base URL, e.g. http://127.0.0.1:30000")
@click.option("--label", default="run", show_default=True, help="Name of this configuration in results and plots.")
@click.option("--output", type=options.NonEmptyPath(dir_okay=False, path_type=Path), help="Results file (JSON Lines).")
@options.api_key_file
@bench_options
def bench_run(
    url, label, output, api_key_file, api, concurrencies, concurrency_sweep, requests, warmup, max_tokens,
    ignore_eos, plot,
):  # fmt: skip
    """Benchmark a running server: per-request TTFT, decode tok/s, inter-token latency, acceptance.

    Each run appends its records to --output under an id of its own (`bench compare --baseline-run` names it).
    """
    from ..bench.client import IDENTIFY_TIMEOUT_S
    from ..bench.runner import RunConfig, run

    levels = [1, 2, 4, 8, 16] if concurrency_sweep else list(concurrencies or [1])
    config = RunConfig(url=url, output=output or _default_output(label), label=label, api=api,
                       concurrencies=levels, requests=requests, warmup=warmup, max_tokens=max_tokens,
                       ignore_eos=ignore_eos, api_key_file=_key_file(api_key_file))  # fmt: skip
    config.headers()  # a bad key file is reported before anything is written
    output = writable_file(config.output)
    click.echo(f"bench: {config.url}: asking what it serves (at most {IDENTIFY_TIMEOUT_S:.0f} s), then "
               f"{config.requests} requests per level at concurrency {', '.join(map(str, levels))}, each at most "
               f"{config.timeout:.0f} s", err=True)  # fmt: skip
    bar = _Progress()
    with bar.progress:
        outcome = run(config, on_result=bar.result, on_level=lambda c, n: bar.level(c, n, label))
    errors.settle()  # measured: what is left is the report
    if outcome.written:
        _finish(output, plot, outcome.run_id)
    if outcome.interrupted:
        raise _stopped(outcome, output)
    if outcome.aborted:
        raise CheckFailed(f"stopped early: {outcome.aborted}; {outcome.finished} finished requests kept")
    if outcome.failed:
        raise CheckFailed(f"{outcome.failed} request(s) failed; see the 'error' fields in {output}")


@bench_group.command("summary")
@click.argument("results", type=options.NonEmptyPath(exists=True, dir_okay=False, path_type=Path))
@options.plot
def bench_summary(results, plot):
    """Summarise (and plot) a results file, including one from an interrupted run."""

    _finish(results, plot)


def _records_for(source: str, label: str, api_key_file: Path | None, run_name: str | None, option: str) -> list[dict]:
    """One run's records: of a results file (the run ``run_name`` names, or the file's only one), or of a server
    URL that is measured now (single stream, defaults)."""
    from ..bench import report
    from ..bench.runner import RunConfig, looks_like_url, run

    if not source.strip():
        raise click.BadParameter("is empty; give a results file or a server's URL", param_hint=label.upper())
    # A URL is measured (base_url refuses what is not http(s) without showing a password), and so is what only
    # looks like a user:password@host, not like a results file that exists.
    if looks_like_url(source) or ("@" in source and not Path(source).exists()):
        if run_name is not None:
            raise click.BadParameter(f"names a run of a results file, but {label.upper()} is a URL (measured now)",
                                     param_hint=option)  # fmt: skip
        config = RunConfig(url=source, output=_default_output(label), label=label, api_key_file=api_key_file)
        output = writable_file(config.output)
        click.echo(f"measuring {label} at {config.url} -> {output}")
        outcome = run(config)
        if outcome.interrupted:
            raise _stopped(outcome, output, f" while measuring {label}")
        return report.runs(report.load(output))[outcome.run_id]
    return report.select_run(report.load(Path(source)), run_name, source, option)


@bench_group.command("compare")
@click.argument("baseline", metavar="BASELINE_FILE|URL")
@click.argument("eagle3", metavar="EAGLE3_FILE|URL")
@click.option("--baseline-run", metavar="RUN", help="The run of BASELINE's results file to judge (its id, or a "
              "label no other run there has); needed when the file holds several runs.")  # fmt: skip
@click.option("--eagle3-run", metavar="RUN", help="The run of EAGLE3's results file to judge, as --baseline-run.")
@options.gate
@options.api_key_file
def bench_compare(baseline, eagle3, baseline_run, eagle3_run, threshold, floor, api_key_file):
    """The A/B gate: fail unless EAGLE-3 beats the baseline (result files or server URLs).

    Each side is one run: a results file of several runs (bench run appends) needs --baseline-run or --eagle3-run
    to name it; exactly the runs named are compared.
    """
    from ..bench import report

    key_file = _key_file(api_key_file)
    verdict = report.compare(
        _records_for(baseline, "baseline", key_file, baseline_run, "--baseline-run"),
        _records_for(eagle3, "eagle3", key_file, eagle3_run, "--eagle3-run"), threshold=threshold, floor=floor,
    )  # fmt: skip
    errors.settle()
    click.echo(report.render_verdict(verdict))
    sys.exit(ExitStatus.OK if verdict.passed else ExitStatus.CHECK_FAILED)


def _side_options(side: str, help_program: str):
    """--a/--b PROGRAM and the side's label, profile and own settings."""
    declared = [
        click.option(f"--{side}", f"{side}_program", required=True, metavar="PROGRAM", help=help_program),
        click.option(f"--{side}-label", default=side.upper(), show_default=True,
                     help=f"Name of side {side.upper()} in results, verdict and plot."),
        click.option(f"--{side}-profile", type=click.Choice(settings.PROFILES), default="eagle3", show_default=True,
                     help=f"Profile side {side.upper()} serves."),
        click.option(f"--{side}-set", f"{side}_assignments", multiple=True, metavar="FIELD=VALUE",
                     help=f"A setting for side {side.upper()} only (repeatable), after --config and --set."),
    ]  # fmt: skip
    return lambda func: functools.reduce(lambda f, option: option(f), reversed(declared), func)


@bench_group.command("ab")
@_side_options("a", "Side A's sglang-eagle3 program (the reference), e.g. $(nix build --print-out-paths "
               ".#sglang-eagle3)/bin/sglang-eagle3; a command line is split like a shell's.")  # fmt: skip
@_side_options("b", "Side B's sglang-eagle3 program (gated against A), e.g. the 0.5.23 stack's.")
@options.config
@options.assignments
@options.gate
@options.output_dir("results/ab")
@bench_options
def bench_ab(a_program, a_label, a_profile, a_assignments, b_program, b_label, b_profile, b_assignments, config,
             assignments, threshold, floor, output_dir, api, concurrencies, concurrency_sweep, requests, warmup,
             max_tokens, ignore_eos, plot):  # fmt: skip
    """Serve A, measure, stop; serve B, measure, stop; fail unless B >= threshold x A.

    The upgrade decided by the gate: the same model, draft and settings on two stacks, e.g.
    `nix run .#upgrade-ab -- --config settings.json` (SGLang 0.5.9 as A, 0.5.23 as B). Each side
    starts through its own `serve`, so its own SGLang judges the settings first.
    """
    from ..bench import ab, report
    from ..bench.runner import RunConfig

    sides = [ab.Side(a_label, a_program, a_profile, list(a_assignments)),
             ab.Side(b_label, b_program, b_profile, list(b_assignments))]  # fmt: skip
    if a_label == b_label:
        raise click.BadParameter(f"both sides are labelled {shown(a_label)}; give --a-label and --b-label")
    resolved, argv = {}, {}
    for option, side in zip(("--a", "--b"), sides, strict=True):
        settings.from_assignments(side.assignments, f"{option}-set")  # its mistakes named by its own option
        if why := ab.check_program(side.program):
            raise click.BadParameter(f"{shown(side.program)} is not a working sglang-eagle3 program: {why}",
                                     param_hint=option)  # fmt: skip
        resolved[side.label] = load_settings(config, [*assignments, *side.assignments], side.profile)
        argv[side.label] = side.argv(config, list(assignments))
    writable_file(output_dir / "ab.jsonl")
    levels = [1, 2, 4, 8, 16] if concurrency_sweep else [1, *[c for c in concurrencies if c != 1]]
    template = RunConfig(url="http://placeholder", output=output_dir / "ab.jsonl", api=api, concurrencies=levels,
                         requests=requests, warmup=warmup, max_tokens=max_tokens, ignore_eos=ignore_eos,
                         api_key_file=_key_file(resolved[b_label].api_key_file))  # fmt: skip
    verdict = ab.run_ab(*sides, resolved, argv, template, output_dir, threshold, floor,
                        log=lambda m: click.echo(m, err=True))  # fmt: skip
    if plot:
        click.echo(f"plot: {report.plot(report.load(output_dir / 'ab.jsonl'), output_dir / 'ab.png')}", err=True)
    click.echo(report.render_verdict(verdict))
    sys.exit(ExitStatus.OK if verdict.passed else ExitStatus.CHECK_FAILED)


def _int_list(text: str, option: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",")]  # an empty item (1,,2 or a trailing comma) is a typo, not a skip
    except ValueError:
        raise click.BadParameter(f"{shown(text)}: expected comma-separated integers, e.g. 1,2,3",
                                 param_hint=option) from None  # fmt: skip
    if min(values) < 1:
        raise click.BadParameter(f"{shown(text)}: expected integers >= 1", param_hint=option)
    return values


@bench_group.command("sweep")
@options.server_settings
@click.option("--steps", default="1,2,3,4,5", show_default=True, help="speculative_num_steps values.")
@click.option("--topk", default="1", show_default=True, help="speculative_eagle_topk values.")
@click.option("--draft-tokens", default="", help="speculative_num_draft_tokens values for top-k > 1.")
@click.option("--draft", "drafts", multiple=True, metavar="PATH", type=options.NonEmptyText(), help="Draft model to "
              "sweep (repeatable: each is swept over the same grid). Default: the setting.")  # fmt: skip
@options.output_dir("results/sweep")
@options.sglang
@bench_options
def bench_sweep(config, assignments, profile, steps, topk, draft_tokens, drafts, output_dir, sglang, api,
                concurrencies, concurrency_sweep, requests, warmup, max_tokens, ignore_eos, plot):  # fmt: skip
    """Start the server for each draft and speculative setting, measure, stop; report the best against baseline.

    With several --draft, each draft is checked (as serve's preflight does) and swept over
    the same grid; accept length and decode tok/s are reported per draft and setting.
    """
    from ..bench import sweep
    from ..bench.runner import RunConfig

    base = load_settings(config, assignments, profile)
    grid = (_int_list(steps, "--steps"), _int_list(topk, "--topk"),
            _int_list(draft_tokens, "--draft-tokens") if draft_tokens else None)  # fmt: skip
    writable_file(output_dir / "sweep.jsonl")
    given = list(drafts)
    drafts = given or [base.speculative_draft_model_path]
    for draft in drafts:  # before preflight, which may fail on the host first and never get to the drafts
        if draft and draft_inputs.looks_local(draft) and not draft_inputs.expanded(draft).is_dir():
            where = "--draft" if draft in given else "speculative_draft_model_path"
            raise click.BadParameter(f"{shown(draft)} is no directory; give a draft model's directory or its hub id",
                                     param_hint=where)  # fmt: skip
    # The host, SGLang and the target once (every point runs what this plan's Python imports); then each draft on
    # its own (a draft that fails is skipped).
    judged = judged_or_refused(preflight.preflight(base, sglang, drafts=drafts))
    points = sweep.grid(base, *grid, drafts)
    if not _drafts_judged(points, drafts, judged.checks.drafts):
        raise CheckFailed("no draft passed its checks; nothing was started.")
    # Single stream always comes first: it is what the points are ranked by.
    levels = [1, 2, 4, 8, 16] if concurrency_sweep else [1, *[c for c in concurrencies if c != 1]]
    key_file = judged.plan.key_files.get(credentials.API_KEY.field)  # the server's, as the plan holds it
    template = RunConfig(url="http://placeholder", output=output_dir / "sweep.jsonl", api=api,
                         concurrencies=levels, requests=requests, warmup=warmup, max_tokens=max_tokens,
                         ignore_eos=ignore_eos, api_key_file=key_file)  # fmt: skip
    sweep.sweep(points, template, output_dir, log=lambda m: click.echo(m, err=True))
    click.echo(sweep.render_table(points))
    if plot and any(p.median_tok_s for p in points):
        click.echo(f"plot: {sweep.plot(points, output_dir / 'sweep.png')}")
    top, gain = sweep.best(points)
    if top is None:
        raise CheckFailed("no speculative point was measured")
    if len(drafts) > 1:  # the choice of draft: each one's best setting
        for name in dict.fromkeys(p.draft for p in points if p.draft):
            mine, mine_gain = sweep.best(points, name)
            if mine is not None:
                click.echo(f"best for {name}: {mine.label} at {mine.median_tok_s:.1f} tok/s"
                           + (f", {mine_gain:.3f}x the baseline" if mine_gain else ""))  # fmt: skip
    gain_text = f", {gain:.3f}x the baseline" if gain else ""
    click.echo(f"best: {top.label} at {top.median_tok_s:.1f} tok/s{gain_text}")


def _drafts_judged(points, drafts: list, judged: dict) -> bool:
    """Each draft's findings (preflight judged each one on its own, ``judged``), printed; the points of a draft
    that cannot work are skipped. True if at least one draft passed."""
    from ..bench.sweep import draft_names

    names, passed = draft_names(drafts), False  # named as sweep.grid names the points
    for draft in drafts:
        checks = judged[draft]
        click.echo(f"-- draft {names[draft]}: {draft}")
        click.echo(checks.render_text())
        failed = [f"{f.name}: {f.message}" for f in checks.findings if f.status is Status.FAIL]
        passed = passed or not failed
        for point in points:
            if failed and point.draft == names[draft] and not point.error:
                point.error = f"draft checks failed ({failed[0]})"
    return passed
