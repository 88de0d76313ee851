"""The ``sglang-eagle3`` command.

Exit codes: 0 success or ready; 1 a check failed (not ready, patch conflict, not all
patches applied); 2 bad input (no SGLang there, wrong version, bad option value).
"""

from __future__ import annotations

import json
import sys

import click

from . import __version__, patchset, probe, sglang_source


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


if __name__ == "__main__":
    main()
