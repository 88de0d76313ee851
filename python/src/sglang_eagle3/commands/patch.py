"""`sglang-eagle3 patch`: list, apply, check and verify this project's SGLang patch set."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from .. import errors, options, stacks
from ..errors import BadInput
from ..exit_status import ExitStatus
from ..judging import patch_check
from ..source.tree import SGLangNotFound, SGLangTree
from ..trees import patchset, release


def _series(directory: Path | None = None, version: str | None = None) -> patchset.PatchSeries:
    """The series in ``directory``, else SGLang ``version``'s own (patches/sglang-<version>/), else the default."""
    try:
        return patchset.PatchSeries.load(directory) if directory else patchset.PatchSeries.for_version(version)
    except patchset.PatchError as err:  # a series that cannot be read: this install is broken or misconfigured
        raise BadInput(str(err)) from None


@click.group("patch")
def patch_group() -> None:
    """Apply or verify this project's SGLang patch set (for installs not built with Nix)."""


@patch_group.command("list")
def patch_list() -> None:
    """Show the patches in series order."""
    series = _series()
    errors.settle()  # what is left is printing
    click.echo(f"Patch set for SGLang {series.sglang_version} ({series.directory}):")
    for p in series.patches:
        click.echo(f"  {p.name}\n      {p.summary}\n      touches: {', '.join(p.files)}")


@patch_group.command("apply")
@options.sglang_to_patch
def patch_apply(sglang: str | None) -> None:
    """Apply every patch not yet applied; all or nothing (the series for the tree's SGLang version)."""
    try:
        tree = release.resolve(sglang)
    except SGLangNotFound as err:
        if sglang is not None:
            raise
        raise BadInput(  # not the readers' hint: a release version is read, never patched
            "no importable 'sglang' package in this Python environment, so there is nothing to patch; give the "
            "directory of the SGLang you serve with --sglang DIR, or install it first (pip install "
            f"sglang=={stacks.default().version}). Whether the series applies to a release: sglang-eagle3 patch "
            f"check --sglang {stacks.default().version}"
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
        raise  # its own status: a conflict, a tree not writable, an interruption, GNU patch missing
    # Done: the tree carries the series. A signal from here on cannot undo it; the report is all that is left.
    errors.settle()
    _report_applied(tree, result)


def _report_applied(tree: SGLangTree, result: patchset.ApplyResult) -> None:
    if not result.applied:
        click.echo(f"All {len(result.already)} patches are already applied to {tree.package}; nothing changed.")
        return
    for p in result.applied:
        click.echo(f"applied          {p.name}")
    for p in result.already:
        click.echo(f"already applied  {p.name}")
    click.echo(f"{tree.package} now carries the whole patch set.")


@patch_group.command("check")
@options.sglang_required
@click.option(
    "--series", "series_dir", metavar="DIR", type=options.NonEmptyPath(exists=True, file_okay=False, path_type=Path),
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
    tree = release.resolve(sglang)
    series = _series(series_dir, tree.version)
    click.echo(f"checking the {len(series.patches)} patches of {series.directory} against SGLang {tree.version} "
               f"at {tree.package} ...", err=True)  # fmt: skip
    report = patch_check.check(series, tree)
    if markdown:
        click.echo(report.markdown())
    else:
        click.echo(json.dumps(report.to_dict(), indent=2) if as_json else report.render_text())
    sys.exit(ExitStatus.OK if report.passed else ExitStatus.CHECK_FAILED)


@patch_group.command("verify")
@options.sglang
@options.json_output
def patch_verify(sglang: str | None, as_json: bool) -> None:
    """Report each patch as applied, not applied or conflicting; exit 1 unless all are applied."""
    tree = release.resolve(sglang)
    series = _series(version=tree.version)
    statuses = patchset.verify(series, tree)  # its errors carry their statuses: the wrong tree 2, no GNU patch 1
    if as_json:
        patches = [{"name": s.patch.name, "state": s.state.value, "detail": s.detail} for s in statuses]
        data = {"target": str(tree.package), "sglang_version": tree.version, "patches": patches}
        click.echo(json.dumps(data, indent=2))
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
