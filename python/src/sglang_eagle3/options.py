"""The options more than one command takes, each declared once (as pip-tools' scripts/options.py does).

A command uses them as decorators: ``@options.json_output``. The server settings' options
(--profile, --set, --config) come together as ``@options.server_settings``; the A/B gate's
(--threshold, --floor) as ``@options.gate``.
"""

from __future__ import annotations

from pathlib import Path

import click

from .cli_common import JSON_ERRORS, FiniteFloat
from .serving import PROFILES
from .serving.credentials import HUB_TOKEN_CREDENTIAL


class NonEmptyPath(click.Path):
    """click's Path, refusing an empty value: ``--dir ''`` would otherwise name the current directory."""

    def convert(self, value, param, ctx):
        if isinstance(value, str) and not value.strip():
            self.fail("is empty; give a path (an empty one would mean the current directory)", param, ctx)
        return super().convert(value, param, ctx)


class NonEmptyText(click.ParamType):
    """Text that is not empty nor blank, for an option that names a path among other things (--sglang, --draft)."""

    name = "text"

    def convert(self, value, param, ctx):
        if isinstance(value, str) and not value.strip():
            self.fail("is empty; give a value (an empty path would mean the current directory)", param, ctx)
        return value


def _remember_json(ctx: click.Context, _param, value: bool) -> bool:
    if value:
        ctx.meta[JSON_ERRORS] = True  # meta is shared by every context of the invocation: the group reads it
    return value


json_output = click.option(
    "--json", "as_json", is_flag=True, callback=_remember_json,
    help='Machine-readable output on stdout; a failure is {"ok": false, "error": {"kind": ..., "message": ...}}.',
)  # fmt: skip

# -- SGLang's source ---------------------------------------------------------------------------


def _sglang(required: bool, to_patch: bool = False):
    default = "" if required else " Default: the sglang this Python imports."
    read = (
        "The SGLang whose source is read: a directory (site-packages, the sglang package, a git checkout), "
        "a wheel file, or a release version, e.g. 0.5.9 (its pristine wheel is fetched once into "
        f"~/.cache/sglang-eagle3/sglang, sha256 checked against nix/pins.json; nothing is installed).{default}"
    )
    # patch apply writes the tree: a directory only (a version or wheel is unpacked in the cache to be read).
    patched = (
        "The SGLang to patch: the directory of the install you serve (site-packages, the sglang package, a git "
        f"checkout).{default} A release version or wheel is not patched; whether the series applies to one: "
        "sglang-eagle3 patch check --sglang VERSION."
    )
    return click.option(
        "--sglang", "sglang", metavar="DIR" if to_patch else "DIR|WHEEL|VERSION", required=required,
        type=NonEmptyText(), help=patched if to_patch else read,
    )  # fmt: skip


# --sglang names the SGLang to read, the same way in every command that reads one.
sglang = _sglang(required=False)
sglang_required = _sglang(required=True)
sglang_to_patch = _sglang(required=False, to_patch=True)

# -- the server settings -----------------------------------------------------------------------


config = click.option(
    "--config", type=NonEmptyPath(dir_okay=False, path_type=Path), envvar="SGLANG_EAGLE3_CONFIG",
    help="Settings file (JSON or TOML). Also $SGLANG_EAGLE3_CONFIG.",
)  # fmt: skip
assignments = click.option(
    "--set", "assignments", multiple=True, metavar="FIELD=VALUE",
    help="Override one setting (repeatable), e.g. --set tp_size=4. Values are JSON or text.",
)  # fmt: skip
profile = click.option(
    "--profile", type=click.Choice(PROFILES), default=PROFILES[0], show_default=True,
    help="eagle3: the tuned EAGLE-3 server; baseline: the same server without speculation.",
)  # fmt: skip


def server_settings(func):
    """--profile, --set and --config: where `load_settings` takes the server settings from."""
    return config(assignments(profile(func)))


# -- the A/B gate (bench compare, bench ab) ------------------------------------------------------------


def gate(func):
    """--threshold and --floor: side B (EAGLE-3, or the new stack) against side A."""
    func = click.option(
        "--floor", type=FiniteFloat(0, inclusive=True), help="And B (EAGLE-3 in compare) at least this many tok/s."
    )(func)
    return click.option(
        "--threshold", type=FiniteFloat(0, inclusive=False), default=1.0, show_default=True,
        help="Minimum ratio of single-stream decode tok/s: B / A (EAGLE-3 / baseline in compare).",
    )(func)  # fmt: skip


def output_dir(default: str):
    """--output-dir: where a multi-run command writes its records, logs and plots."""
    return click.option(
        "--output-dir", type=NonEmptyPath(file_okay=False, path_type=Path), default=Path(default), show_default=True,
        help="Directory for the results (JSON Lines), the servers' logs and the plots; created if missing.",
    )  # fmt: skip


# -- the server's API key (bench) -------------------------------------------------------------------

api_key_file = click.option(
    "--api-key-file", type=NonEmptyPath(path_type=Path), metavar="FILE",
    help="File holding the server's API key (sent as 'Authorization: Bearer'); mode 600. "
    "Default: $CREDENTIALS_DIRECTORY/api-key when run by systemd with LoadCredential=api-key:...",
)  # fmt: skip
plot = click.option("--plot/--no-plot", default=True, show_default=True, help="Write a PNG next to the results.")

# -- model weights (models) ---------------------------------------------------------------------------

lock = click.option(
    "--lock", "lock_file", required=True, type=NonEmptyPath(path_type=Path), help="The model's lock file."
)
model_dir = click.option(
    "--dir", "directory", required=True, type=NonEmptyPath(path_type=Path), help="The model directory."
)
JOBS = click.IntRange(1, 64)
download_jobs = click.option("--jobs", type=JOBS, default=8, show_default=True, help="Parallel downloads.")
hash_jobs = click.option("--jobs", type=JOBS, default=None, help="Files hashed in parallel [default: CPUs, at most 8].")
token_file = click.option(
    "--token-file", type=NonEmptyPath(dir_okay=False, path_type=Path),
    help=f"File holding a Hugging Face token (gated or private repositories). Default: "
    f"$CREDENTIALS_DIRECTORY/{HUB_TOKEN_CREDENTIAL} under systemd. Never taken from argv or the environment.",
)  # fmt: skip
progress_interval = click.option(
    "--progress-interval", type=FiniteFloat(0.1, inclusive=True), default=30.0, show_default=True,
    help="Seconds between progress lines when stderr is not a terminal (logs); a terminal gets a bar.",
)  # fmt: skip
