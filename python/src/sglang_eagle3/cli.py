"""The ``sglang-eagle3`` command. Its exit statuses are listed in exit_status.py (and in --help)."""

from __future__ import annotations

import json
import signal
import sys
from pathlib import Path

import click

from . import SGLANG_VERSION, __version__, options
from .bench.cli import bench_group
from .cli_common import TopLevelGroup, check_key_files, load_settings
from .errors import BadInput, CheckFailed, printable
from .exit_status import ExitStatus, help_text
from .host import gpus
from .judging import draft_check, patch_check, preflight, probe
from .models import draft_inputs
from .models.cli import models_group
from .serving import credentials, launch_plan, launcher, settings
from .source import allreduce_gates, patchset, sglang_release, sglang_source
from .source.source_index import SourceLayoutError


def _series(directory: Path | None = None, version: str | None = None) -> patchset.PatchSeries:
    """The series in ``directory``, else SGLang ``version``'s own (patches/sglang-<version>/), else the default."""
    try:
        return patchset.PatchSeries.load(directory) if directory else patchset.PatchSeries.for_version(version)
    except patchset.PatchError as err:  # a series that cannot be read: this install is broken or misconfigured
        raise BadInput(str(err)) from None


@click.group(
    cls=TopLevelGroup,
    context_settings={"help_option_names": ["-h", "--help"]},
    epilog="\b\nExit status:\n" + help_text(),
)
@click.version_option(__version__, prog_name="sglang-eagle3")
def main() -> None:
    """Serve Kimi-K2.5 with EAGLE-3 on SGLang 0.5.9 or 0.5.23: patch set, probe, launcher, benchmark."""


main.add_command(bench_group)  # defined with the benchmark, in bench/cli.py
main.add_command(models_group)  # model lock / fetch / verify, in models/cli.py


# -- patch ------------------------------------------------------------------------------


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
@options.sglang_to_patch
def patch_apply(sglang: str | None) -> None:
    """Apply every patch not yet applied; all or nothing (the series for the tree's SGLang version)."""
    try:
        tree = sglang_release.resolve(sglang)
    except sglang_source.SGLangNotFound as err:
        if sglang is not None:
            raise
        raise BadInput(  # not the readers' hint: a release version is read, never patched
            "no importable 'sglang' package in this Python environment, so there is nothing to patch; give the "
            "directory of the SGLang you serve with --sglang DIR, or install it first (pip install "
            f"sglang=={SGLANG_VERSION}). Whether the series applies to a release: sglang-eagle3 patch check "
            f"--sglang {SGLANG_VERSION}"
        ) from err
    if tree.release is not None:
        raise BadInput(
            f"--sglang {sglang} names a release: its pristine wheel ({tree.release}), unpacked in the cache to be "
            "read, is not an SGLang anything runs, so it is not patched. Give the directory of the SGLang you "
            f"serve (or none: the one this Python imports); whether the series applies to {tree.version}: "
            f"sglang-eagle3 patch check --sglang {tree.version}"
        )
    series = _series(version=tree.version)
    try:
        result = patchset.apply(series, tree)
    except patchset.PatchError as err:
        if tree.version != series.sglang_version and err.status is ExitStatus.CHECK_FAILED:
            raise BadInput(str(err)) from None  # a conflict on another SGLang version: the wrong tree
        raise  # its own status: a conflict, a tree not writable, an interruption
    # Done: the tree carries the series. A signal from here on cannot undo it; the report is all that is left.
    previous = {sig: signal.signal(sig, signal.SIG_IGN) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        _report_applied(tree, result)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _report_applied(tree: sglang_source.SGLangTree, result: patchset.ApplyResult) -> None:
    if not result.applied:
        click.echo(f"All {len(result.already)} patches are already applied to {tree.package}; nothing changed.")
        return
    for p in result.applied:
        click.echo(f"applied          {p.name}")
    for p in result.already:
        click.echo(f"already applied  {p.name}")
    click.echo(f"{tree.package} now carries the whole patch set.")


@patch.command("check")
@options.sglang_required
@click.option(
    "--series", "series_dir", metavar="DIR", type=click.Path(exists=True, file_okay=False, path_type=Path),
    help="The patch series to check (a patches/sglang-<version> directory). Default: the tree's own "
    "version's series when this project has one, else the default series.",
)  # fmt: skip
@options.json_output
@click.option("--markdown", is_flag=True, help="A Markdown table of the outcomes (as docs/upgrade.md shows them).")
def patch_check_command(sglang: str, series_dir: Path | None, as_json: bool, markdown: bool) -> None:
    """For each patch: applies, already applied, already upstream, not needed, still needed or conflicts.

    Reads the other tree's source (nothing is imported or changed); exit 1 when a patch is
    still needed there or conflicts, i.e. the series needs work for that version.
    """
    if as_json and markdown:
        raise click.UsageError("--json and --markdown are two formats of one report: give one of them")
    tree = sglang_release.resolve(sglang)
    series = _series(series_dir, tree.version)
    click.echo(f"checking the {len(series.patches)} patches of {series.directory} against SGLang {tree.version} "
               f"at {tree.package} ...", err=True)  # fmt: skip
    report = patch_check.check(series, tree)
    if markdown:
        click.echo(report.markdown())
    else:
        click.echo(json.dumps(report.to_dict(), indent=2) if as_json else report.render_text())
    sys.exit(ExitStatus.OK if report.passed else ExitStatus.CHECK_FAILED)


@patch.command("verify")
@options.sglang
@options.json_output
def patch_verify(sglang: str | None, as_json: bool) -> None:
    """Report each patch as applied, not applied or conflicting; exit 1 unless all are applied."""
    tree = sglang_release.resolve(sglang)
    series = _series(version=tree.version)
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
    conflicts = [s.patch.name for s in statuses if s.state is patchset.PatchState.CONFLICT]
    if conflicts and not as_json:  # apply refuses such a tree: its files hold other changes
        click.echo(
            f"{', '.join(conflicts)} {'conflicts' if len(conflicts) == 1 else 'conflict'} with the files of "
            f"{tree.package}: they hold other changes (local edits, or another version of a patch), so `patch apply` "
            f"would refuse the tree. Restore SGLang's own files (pip install --force-reinstall --no-deps "
            f"sglang=={tree.version}), then run `{patchset.apply_command(tree)}`.",
            err=True,
        )
    elif any(s.state is not patchset.PatchState.APPLIED for s in statuses) and not as_json:
        click.echo(f"Not all patches are applied: run `{patchset.apply_command(tree)}`.", err=True)
    if any(s.state is not patchset.PatchState.APPLIED for s in statuses):
        sys.exit(ExitStatus.CHECK_FAILED)


# -- probe ------------------------------------------------------------------------------


@main.command("probe")
@options.sglang
@click.option(
    "--arch", help=f"Target model architecture. Default: from --model's config.json, else {probe.DEFAULT_ARCH}."
)
# The defaults are the server settings' (serving/settings.py), so the probe judges what `serve` starts.
@click.option(
    "--algorithm",
    default=settings.default("speculative_algorithm"),
    show_default=True,
    type=click.Choice(settings.ALGORITHMS, case_sensitive=False),
    help="Speculative algorithm (speculative_algorithm).",
)
@click.option(
    "--compute-capability", default=settings.TUNED_COMPUTE_CAPABILITY, show_default=True,
    help="GPU compute capability, e.g. 9.0. Default: the GPUs the settings are tuned for.",
)  # fmt: skip
@click.option(
    "--tp", "tp_size", default=settings.default("tp_size"), show_default=True, type=click.IntRange(min=1),
    help="Tensor parallel size (tp_size).",
)  # fmt: skip
@click.option(
    "--torch-symm-mem/--no-torch-symm-mem", default=settings.default("enable_torch_symm_mem"), show_default=True,
    help="Is it requested? (enable_torch_symm_mem)",
)  # fmt: skip
@click.option(
    "--allreduce-fusion/--no-allreduce-fusion", default=settings.default("enable_flashinfer_allreduce_fusion"),
    show_default=True, help="Is it requested? (enable_flashinfer_allreduce_fusion)",
)  # fmt: skip
@click.option(
    "--pcie-ipc-allreduce/--no-pcie-ipc-allreduce", "pcie_ipc", default=settings.default("pcie_ipc_allreduce"),
    show_default=True, help="Is it requested? (pcie_ipc_allreduce; SGLang 0.5.23 and later)",
)  # fmt: skip
@click.option(
    "--topology", type=click.Choice(allreduce_gates.TOPOLOGIES), default=None,
    help="How the GPUs are connected. Default: read from this host's nvidia-smi topo -m for GPU0..tp-1; "
    "without it, PCIe, as on the tuned host (reported as assumed).",
)  # fmt: skip
@click.option("--draft", metavar="PATH", help="Draft model to check: a directory, or a hub id in the local HF cache.")
@click.option(
    "--model", metavar="PATH", default=settings.default("model_path"), show_default=True,
    help="Target model the draft is checked against: a directory, or a hub id in the local HF cache.",
)  # fmt: skip
@options.json_output
def probe_command(
    sglang, arch, algorithm, compute_capability, tp_size, torch_symm_mem, allreduce_fusion, pcie_ipc, topology, draft,
    model, as_json,
):  # fmt: skip
    """Check, from SGLang's source, that it can serve ARCH with speculative decoding.

    No GPU, no weights: it finds every method the speculative path calls on the
    target model and checks the target class provides it, then reports what the
    requested all-reduce optimisations will do on the given GPU generation.
    With --draft: whether the draft fits the target and this SGLang, and which
    target layers it will see (see docs/draft-checks.md).
    """
    tree = sglang_release.resolve(sglang)
    try:
        if arch is None:
            given = draft_inputs.locate(model, "target model") if draft else None
            arch = probe.DEFAULT_ARCH
            if given and given.directory:
                arch = draft_inputs.Fields(
                    draft_inputs.read_config(given.directory, "target model"), model
                ).architecture()
        found = gpus.query_topology(None, tp_size) if topology is None else None
        result = probe.probe(
            tree,
            arch=arch,
            algorithm=algorithm,
            compute_capability=compute_capability,
            tp_size=tp_size,
            torch_symm_mem=torch_symm_mem,
            allreduce_fusion=allreduce_fusion,
            pcie_ipc=pcie_ipc,
            topology=topology or (found.kind if found else None),
            topology_how=found.how if found else "--topology" if topology else None,
        )
        if draft is not None:
            result.draft = draft_check.check(tree, draft, model, algorithm=result.canonical_algorithm, target_arch=arch)
    except SourceLayoutError as err:
        raise BadInput(sglang_release.layout_problem(tree, err)) from None
    except ValueError as err:  # a compute capability or algorithm the source does not know
        raise BadInput(str(err)) from None
    if result.class_location is None:  # a typo or another model: bad input, not a missing patch
        raise BadInput(
            result.findings[0].message + "; --arch is the class name in the model's config.json 'architectures'"
        )
    click.echo(json.dumps(result.to_dict(), indent=2) if as_json else probe.render_text(result))
    sys.exit(ExitStatus.OK if result.passed else ExitStatus.CHECK_FAILED)


# -- settings and serve -------------------------------------------------------------------


@main.group("settings")
def settings_group() -> None:
    """Show the server settings, their JSON Schema, or the reference table."""


@settings_group.command("show")
@options.server_settings
def settings_show(config, assignments, profile) -> None:
    """The effective settings as JSON (after file, environment, --set and profile); secrets masked."""
    shown = load_settings(config, assignments, profile).model_dump(mode="json")
    shown["environment"] = credentials.masked_env(shown["environment"])
    click.echo(json.dumps(shown, indent=2))


@settings_group.command("schema")
def settings_schema() -> None:
    """JSON Schema of the settings (the NixOS module and the docs are generated from it)."""
    click.echo(json.dumps(settings.json_schema(), indent=2))


@settings_group.command("reference")
@click.option("--write", type=click.Path(exists=True, dir_okay=False, path_type=Path), help="Update this file's block.")
def settings_reference(write: Path | None) -> None:
    """The settings reference as a Markdown table (docs/serve.md embeds it between markers)."""
    table = settings.reference_markdown()
    if write is None:
        click.echo(table)
        return
    start, end = "<!-- settings-reference:start -->", "<!-- settings-reference:end -->"
    if not write.is_file():  # a FIFO or device would block or never end
        raise BadInput(f"{write} is not a regular file")
    try:
        text = write.read_text()
    except UnicodeDecodeError:
        raise BadInput(f"{write} is not UTF-8 text") from None
    if start not in text or end not in text:
        raise BadInput(f"{write} has no {start} ... {end} block to update")
    before, rest = text.split(start, 1)
    try:
        write.write_text(f"{before}{start}\n{table}\n{end}{rest.split(end, 1)[1]}")
    except OSError as err:
        raise BadInput(f"cannot write {write}: {err.strerror}") from None
    click.echo(f"updated the settings reference in {write}")


def _stopped_before_start(_signum, _frame):
    """SIGTERM to `serve` before the server started (preflight): exit 0, as a stopped server does (systemd stops the
    unit so, and counts any other status as a failure)."""
    click.echo("sglang-eagle3 serve: stopped by SIGTERM before the server started; nothing was started", err=True)
    sys.exit(ExitStatus.OK)


@main.command("serve")
@options.server_settings
@click.option("--dry-run", is_flag=True, help="Print the plan and the preflight verdicts; start nothing (--json too).")
@options.json_output
@options.sglang
def serve_command(config, assignments, profile, dry_run, as_json, sglang) -> None:
    """Preflight, then start SGLang and wait until it serves.

    Preflight takes seconds: the probe on the installed SGLang, GPUs (nvidia-smi),
    model directories, the port. Any failure stops here, before the model load.
    With --sglang, preflight reads that SGLang; the command still runs the one its
    Python imports, and the output says so when the two differ.
    """
    if not (dry_run or as_json):  # the launcher answers SIGTERM from the start on; before, this does, the same way
        signal.signal(signal.SIGTERM, _stopped_before_start)
    s = load_settings(config, assignments, profile)
    check_key_files(s)
    tree = sglang_release.resolve(sglang) if sglang is not None else None
    plan = launch_plan.build(s)
    checks = preflight.run(s, tree)
    judged, runs = tree or sglang_release.importable(), launch_plan.imported_sglang(plan)
    note = sglang_release.not_the_one_run(judged, runs, plan.argv[0])
    if dry_run or as_json:
        if as_json:
            click.echo(json.dumps({
                "profile": profile, "argv": plan.argv, "sglang_argv": plan.sglang_argv,
                "env": credentials.masked_env(plan.env), "health_url": launch_plan.health_url(s),
                "sglang": {"judged": str(judged.package) if judged else None, "runs": str(runs) if runs else None,
                           "note": note},
                "preflight": checks.to_dict(),
            }, indent=2))  # fmt: skip
        else:
            click.echo(f"profile: {profile}")
            click.echo(f"command: {printable(plan.shell())}")  # --json has the argv exactly
            for key, value in credentials.masked_env(plan.env).items():
                click.echo(f"env:     {key}={printable(value)}")
            if note:
                click.echo(f"note:    {note}")
            click.echo(checks.render_text())
        sys.exit(ExitStatus.OK if checks.passed else ExitStatus.CHECK_FAILED)
    click.echo(checks.render_text())
    if not checks.passed:
        raise CheckFailed("preflight failed; nothing was started. Fix the items marked FAIL above.")
    if note:
        click.echo(f"note: {note}", err=True)
    click.echo(f"starting: {plan.shell()}")
    outcome = launcher.serve(
        plan, launch_plan.health_url(s), s.ready_timeout, s.stop_timeout, log=lambda m: click.echo(m, err=True)
    )
    click.echo(f"sglang-eagle3 serve: {outcome.message}", err=True)
    sys.exit(outcome.status)


if __name__ == "__main__":
    main()
