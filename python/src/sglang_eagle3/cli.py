"""The ``sglang-eagle3`` command.

Exit codes: 0 success or ready; 1 a check failed (not ready, patch conflict, not all
patches applied); 2 bad input (no SGLang there, wrong version, bad option value).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from . import __version__, launcher, patchset, preflight, probe, render, settings, sglang_source


class BadInput(click.ClickException):
    """Wrong input: the message says what is wrong and how to fix it."""

    exit_code = 2


def _tree(target: str | None) -> sglang_source.SGLangTree:
    try:
        return sglang_source.locate(target)
    except sglang_source.SGLangNotFound as err:
        raise BadInput(str(err)) from None


def _series() -> patchset.PatchSeries:
    try:
        return patchset.PatchSeries.load()
    except patchset.PatchError as err:
        raise BadInput(str(err)) from None


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="sglang-eagle3")
def main() -> None:
    """Serve Kimi-K2.5 with EAGLE-3 on SGLang 0.5.9: patch set, probe, launcher, benchmark."""


# -- patch ------------------------------------------------------------------------------

target_option = click.option(
    "--target",
    metavar="DIR",
    help="SGLang tree: site-packages, the sglang package directory, or a git checkout. "
    "Default: the sglang this Python imports.",
)


@main.group()
def patch() -> None:
    """Apply or verify this project's SGLang patch set (for installs not built with Nix)."""


@patch.command("list")
def patch_list() -> None:
    """Show the patches in series order."""
    series = _series()
    click.echo(f"Patch set for SGLang {series.sglang_version} ({series.directory}):")
    for p in series.patches:
        click.echo(f"  {p.name}\n      {p.summary}\n      touches: {', '.join(p.files)}")


@patch.command("apply")
@target_option
def patch_apply(target: str | None) -> None:
    """Apply every patch not yet applied; all or nothing."""
    series, tree = _series(), _tree(target)
    try:
        result = patchset.apply(series, tree)
    except patchset.PatchError as err:
        if tree.version != series.sglang_version:
            raise BadInput(str(err)) from None
        raise click.ClickException(str(err)) from None
    if not result.applied:
        click.echo(f"All {len(result.already)} patches are already applied to {tree.package}; nothing changed.")
        return
    for p in result.applied:
        click.echo(f"applied          {p.name}")
    for p in result.already:
        click.echo(f"already applied  {p.name}")
    click.echo(f"{tree.package} now carries the whole patch set.")


@patch.command("verify")
@target_option
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def patch_verify(target: str | None, as_json: bool) -> None:
    """Report each patch as applied, not applied or conflicting; exit 1 unless all are applied."""
    series, tree = _series(), _tree(target)
    try:
        statuses = patchset.verify(series, tree)
    except patchset.PatchError as err:
        raise BadInput(str(err)) from None
    if as_json:
        click.echo(
            json.dumps(
                {
                    "target": str(tree.package),
                    "sglang_version": tree.version,
                    "patches": [{"name": s.patch.name, "state": s.state.value, "detail": s.detail} for s in statuses],
                },
                indent=2,
            )
        )
    else:
        click.echo(f"SGLang {tree.version} at {tree.package}:")
        for s in statuses:
            click.echo(f"  {s.state.value:<12} {s.patch.name}")
            if s.detail:
                click.echo("      " + s.detail.replace("\n", "\n      "))
    if any(s.state is not patchset.PatchState.APPLIED for s in statuses):
        if not as_json:
            click.echo("Not all patches are applied: run `sglang-eagle3 patch apply`.", err=True)
        sys.exit(1)


# -- probe ------------------------------------------------------------------------------


@main.command("probe")
@target_option
@click.option("--arch", default=probe.DEFAULT_ARCH, show_default=True, help="Target model architecture (config.json).")
@click.option(
    "--algorithm",
    default="EAGLE3",
    show_default=True,
    type=click.Choice(["EAGLE3", "EAGLE", "NEXTN", "STANDALONE"], case_sensitive=False),
    help="Speculative algorithm.",
)
@click.option("--compute-capability", default="12.0", show_default=True, help="GPU compute capability, e.g. 9.0.")
@click.option("--tp", "tp_size", default=8, show_default=True, type=click.IntRange(min=1), help="Tensor parallel size.")
@click.option("--torch-symm-mem/--no-torch-symm-mem", default=True, show_default=True, help="Is it requested?")
@click.option("--allreduce-fusion/--no-allreduce-fusion", default=True, show_default=True, help="Is it requested?")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def probe_command(target, arch, algorithm, compute_capability, tp_size, torch_symm_mem, allreduce_fusion, as_json):
    """Check, from SGLang's source, that it can serve ARCH with speculative decoding.

    No GPU, no weights: it finds every method the speculative path calls on the
    target model and checks the target class provides it, then reports what the
    requested all-reduce optimisations will do on the given GPU generation.
    """
    tree = _tree(target)
    try:
        report = probe.probe(
            tree,
            arch=arch,
            algorithm=algorithm,
            compute_capability=compute_capability,
            tp_size=tp_size,
            torch_symm_mem=torch_symm_mem,
            allreduce_fusion=allreduce_fusion,
        )
    except ValueError as err:
        raise BadInput(str(err)) from None
    click.echo(json.dumps(report.to_dict(), indent=2) if as_json else probe.render_text(report))
    sys.exit(0 if report.ready else 1)


# -- settings and serve -------------------------------------------------------------------

SECRET_WORDS = ("KEY", "TOKEN", "SECRET", "PASSWORD")


def masked(env: dict[str, str]) -> dict[str, str]:
    """Environment for display: values of secret-looking variables replaced."""
    return {
        k: "***" if any(w in k.upper() for w in SECRET_WORDS) and not k.endswith("_FILE") else v for k, v in env.items()
    }


def settings_options(func):
    func = click.option(
        "--profile", type=click.Choice(settings.PROFILES), default="eagle3", show_default=True,
        help="eagle3: the tuned EAGLE-3 server; baseline: the same server without speculation.",
    )(func)  # fmt: skip
    func = click.option(
        "--set", "assignments", multiple=True, metavar="FIELD=VALUE",
        help="Override one setting (repeatable), e.g. --set tp_size=4. Values are JSON or text.",
    )(func)  # fmt: skip
    func = click.option(
        "--config", type=click.Path(dir_okay=False, path_type=Path), envvar="SGLANG_EAGLE3_CONFIG",
        help="Settings file (JSON or TOML). Also $SGLANG_EAGLE3_CONFIG.",
    )(func)  # fmt: skip
    return func


def _load_settings(config, assignments, profile) -> settings.ServerSettings:
    try:
        return settings.load(config, list(assignments), profile=profile)
    except settings.SettingsError as err:
        raise BadInput(str(err)) from None


@main.group("settings")
def settings_group() -> None:
    """Show the server settings, their JSON Schema, or the reference table."""


@settings_group.command("show")
@settings_options
def settings_show(config, assignments, profile) -> None:
    """The effective settings as JSON (after file, environment, --set and profile)."""
    click.echo(_load_settings(config, assignments, profile).model_dump_json(indent=2))


@settings_group.command("schema")
def settings_schema() -> None:
    """JSON Schema of the settings (the NixOS module and the docs are generated from it)."""
    click.echo(json.dumps(settings.json_schema(), indent=2))


@settings_group.command("reference")
@click.option("--write", type=click.Path(exists=True, dir_okay=False, path_type=Path), help="Update this file's block.")
def settings_reference(write: Path | None) -> None:
    """The settings reference as a Markdown table (the README embeds it between markers)."""
    table = settings.reference_markdown()
    if write is None:
        click.echo(table)
        return
    start, end = "<!-- settings-reference:start -->", "<!-- settings-reference:end -->"
    text = write.read_text()
    if start not in text or end not in text:
        raise BadInput(f"{write} has no {start} ... {end} block to update")
    before, rest = text.split(start, 1)
    write.write_text(f"{before}{start}\n{table}\n{end}{rest.split(end, 1)[1]}")
    click.echo(f"updated the settings reference in {write}")


@main.command("serve")
@settings_options
@click.option("--dry-run", is_flag=True, help="Print the plan and the preflight verdicts; start nothing.")
@click.option("--json", "as_json", is_flag=True, help="With --dry-run: machine-readable plan.")
@click.option("--sglang", "sglang_target", metavar="DIR", help="SGLang tree to probe (default: the importable one).")
def serve_command(config, assignments, profile, dry_run, as_json, sglang_target) -> None:
    """Preflight, then start SGLang and wait until it serves.

    Preflight takes seconds: the probe on the installed SGLang, GPUs (nvidia-smi),
    model directories, the port. Any failure stops here, before the model load.
    """
    s = _load_settings(config, assignments, profile)
    plan = render.plan(s)
    report = preflight.run(s, sglang_target)
    if dry_run or as_json:
        if as_json:
            click.echo(json.dumps({
                "profile": profile, "argv": plan.argv, "sglang_argv": plan.sglang_argv, "env": masked(plan.env),
                "health_url": render.health_url(s), "ok": report.ok,
                "preflight": [vars(c) for c in report.checks],
            }, indent=2))  # fmt: skip
        else:
            click.echo(f"profile: {profile}")
            click.echo(f"command: {plan.shell()}")
            for key, value in masked(plan.env).items():
                click.echo(f"env:     {key}={value}")
            _print_checks(report)
        sys.exit(0 if report.ok else 1)
    _print_checks(report)
    if not report.ok:
        click.echo("preflight failed; nothing was started. Fix the items marked FAIL above.", err=True)
        sys.exit(1)
    click.echo(f"starting: {plan.shell()}")
    outcome = launcher.serve(plan, render.health_url(s), s.ready_timeout, log=lambda m: click.echo(m, err=True))
    if outcome.code:
        click.echo(f"sglang-eagle3 serve: {outcome.message}", err=True)
    sys.exit(outcome.code)


def _print_checks(report: preflight.Preflight) -> None:
    for check in report.checks:
        click.echo(f"[{check.verdict.upper():>4}] {check.name}: {check.message}")


# -- bench ----------------------------------------------------------------------------------


@main.group("bench")
def bench_group() -> None:
    """Measure decode throughput; gate EAGLE-3 against the baseline; sweep speculative settings."""


def _default_output(label: str) -> Path:
    import datetime as dt

    return Path("results") / f"{label}-{dt.datetime.now().strftime('%Y%m%d-%H%M%S')}.jsonl"


def bench_options(func):
    options = [
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
        click.option("--plot/--no-plot", default=True, show_default=True, help="Write a PNG next to the results."),
    ]  # fmt: skip
    for option in reversed(options):
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
        from .bench.runner import result_summary_line

        if self.task is not None:
            self.progress.update(self.task, advance=1, last=result_summary_line(result))


def _finish(output: Path, plot: bool) -> None:
    from .bench import report

    records = report.load(output)
    click.echo(report.render_summary(report.summarize(records)))
    click.echo(f"results: {output}")
    if plot and any(r["type"] == "request" and r.get("ok") for r in records):
        click.echo(f"plot:    {report.plot(records, output.with_suffix('.png'))}")


@bench_group.command("run")
@click.option("--url", required=True, help="Server base URL, e.g. http://127.0.0.1:30000")
@click.option("--label", default="run", show_default=True, help="Name of this configuration in results and plots.")
@click.option("--output", type=click.Path(dir_okay=False, path_type=Path), help="Results file (JSON Lines).")
@bench_options
def bench_run(
    url, label, output, api, concurrencies, concurrency_sweep, requests, warmup, max_tokens, ignore_eos, plot
):
    """Benchmark a running server: per-request TTFT, decode tok/s, inter-token latency, acceptance."""
    from .bench.client import BenchError
    from .bench.runner import RunConfig, run

    output = output or _default_output(label)
    levels = [1, 2, 4, 8, 16] if concurrency_sweep else list(concurrencies or [1])
    try:
        config = RunConfig(url=url.rstrip("/"), output=output, label=label, api=api, concurrencies=levels,
                           requests=requests, warmup=warmup, max_tokens=max_tokens, ignore_eos=ignore_eos)  # fmt: skip
        bar = _Progress()
        with bar.progress:
            outcome = run(config, on_result=bar.result, on_level=lambda c, n: bar.level(c, n, label))
    except BenchError as err:
        raise BadInput(str(err)) from None
    if output.exists():
        _finish(output, plot)
    if outcome.interrupted:
        click.echo(f"interrupted: {outcome.finished} finished requests are kept in {output}", err=True)
        sys.exit(130)
    if outcome.aborted:
        click.echo(f"stopped early: {outcome.aborted}; {outcome.finished} finished requests kept", err=True)
        sys.exit(1)
    if outcome.failed:
        click.echo(f"{outcome.failed} request(s) failed; see the 'error' fields in {output}", err=True)
        sys.exit(1)


@bench_group.command("summary")
@click.argument("results", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--plot/--no-plot", default=True, show_default=True)
def bench_summary(results, plot):
    """Summarise (and plot) a results file, including one from an interrupted run."""
    from .bench.client import BenchError

    try:
        _finish(results, plot)
    except BenchError as err:
        raise BadInput(str(err)) from None


def _records_for(source: str, label: str) -> list[dict]:
    """A results file, or a server URL that is measured now (single stream, defaults)."""
    from .bench import report
    from .bench.runner import RunConfig, run

    if source.startswith(("http://", "https://")):
        output = _default_output(label)
        click.echo(f"measuring {label} at {source} -> {output}")
        outcome = run(RunConfig(url=source.rstrip("/"), output=output, label=label))
        if outcome.interrupted:
            sys.exit(130)
        return report.load(output)
    return report.load(Path(source))


@bench_group.command("compare")
@click.argument("baseline")
@click.argument("eagle3")
@click.option("--threshold", type=float, default=1.0, show_default=True,
              help="Minimum EAGLE-3 / baseline ratio of single-stream decode tok/s.")  # fmt: skip
@click.option("--floor", type=float, help="And at least this many tok/s.")
def bench_compare(baseline, eagle3, threshold, floor):
    """The A/B gate: fail unless EAGLE-3 beats the baseline (result files or server URLs)."""
    from .bench import report
    from .bench.client import BenchError

    try:
        verdict = report.compare(
            _records_for(baseline, "baseline"), _records_for(eagle3, "eagle3"), threshold=threshold, floor=floor
        )
    except BenchError as err:
        raise BadInput(str(err)) from None
    click.echo(report.render_verdict(verdict))
    sys.exit(0 if verdict.passed else 1)


def _int_list(text: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise click.BadParameter(f"{text!r}: expected comma-separated integers, e.g. 1,2,3") from None
    if not values or min(values) < 1:
        raise click.BadParameter(f"{text!r}: expected integers >= 1")
    return values


@bench_group.command("sweep")
@settings_options
@click.option("--steps", default="1,2,3,4,5", show_default=True, help="speculative_num_steps values.")
@click.option("--topk", default="1", show_default=True, help="speculative_eagle_topk values.")
@click.option("--draft-tokens", default="", help="speculative_num_draft_tokens values for top-k > 1.")
@click.option("--output-dir", type=click.Path(file_okay=False, path_type=Path), default=Path("results/sweep"),
              show_default=True)  # fmt: skip
@click.option("--sglang", "sglang_target", metavar="DIR", help="SGLang tree for the preflight probe.")
@bench_options
def bench_sweep(config, assignments, profile, steps, topk, draft_tokens, output_dir, sglang_target, api,
                concurrencies, concurrency_sweep, requests, warmup, max_tokens, ignore_eos, plot):  # fmt: skip
    """Start the server for each speculative setting, measure, stop; report the best against baseline."""
    from .bench import report, sweep
    from .bench.runner import RunConfig

    base = _load_settings(config, assignments, profile)
    checks = preflight.run(base, sglang_target)
    _print_checks(checks)
    if not checks.ok:
        click.echo("preflight failed; nothing was started.", err=True)
        sys.exit(1)
    points = sweep.grid(base, _int_list(steps), _int_list(topk), _int_list(draft_tokens) if draft_tokens else None)
    template = RunConfig(url="http://placeholder", output=output_dir / "sweep.jsonl", api=api,
                         concurrencies=[1, *[c for c in concurrencies if c != 1]], requests=requests,
                         warmup=warmup, max_tokens=max_tokens, ignore_eos=ignore_eos)  # fmt: skip
    sweep.sweep(points, template, output_dir, log=lambda m: click.echo(m, err=True))
    click.echo(f"{'point':<24} {'median tok/s':>12}")
    for p in points:
        click.echo(f"{p.label:<24} {p.median_tok_s or float('nan'):>12.1f}" + (f"  ({p.error})" if p.error else ""))
    top, gain = sweep.best(points)
    results = output_dir / "sweep.jsonl"
    if plot and results.exists():
        click.echo(f"plot: {report.plot(report.load(results), output_dir / 'sweep.png')}")
    if top is None:
        click.echo("no speculative point was measured", err=True)
        sys.exit(1)
    gain_text = f", {gain:.3f}x the baseline" if gain else ""
    click.echo(f"best: {top.label} at {top.median_tok_s:.1f} tok/s{gain_text}")


if __name__ == "__main__":
    main()
