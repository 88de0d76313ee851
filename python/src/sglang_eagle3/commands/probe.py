"""`sglang-eagle3 probe`: whether an SGLang can serve a model with speculative decoding, read from its source."""

from __future__ import annotations

import json
import sys

import click

from .. import options
from ..cli_common import load_settings
from ..errors import BadInput
from ..exit_status import ExitStatus
from ..host import gpus
from ..judging import draft_check, speculative_support
from ..models import draft_inputs
from ..serving import settings
from ..source import allreduce_gates
from ..source.index import SourceLayoutError
from ..trees import release


@click.command("probe")
@options.sglang
# What is probed is what `serve` starts: the same settings (--config, --set, --profile), read the same way.
@options.server_settings
@click.option(
    "--arch",
    help="Target model architecture. Default: from model_path's config.json (with --draft), else "
    f"{speculative_support.DEFAULT_ARCH}.",
)
@click.option(
    "--compute-capability", default=settings.TUNED_COMPUTE_CAPABILITY, show_default=True,
    help="GPU compute capability, e.g. 9.0. Default: the GPUs the settings are tuned for.",
)  # fmt: skip
@click.option(
    "--topology", type=click.Choice(allreduce_gates.TOPOLOGIES), default=None,
    help="How the GPUs are connected. Default: read from this host's nvidia-smi topo -m for GPU0..tp-1; "
    "without it, PCIe, as on the tuned host (reported as assumed).",
)  # fmt: skip
@click.option(
    "--draft", metavar="PATH", type=options.NonEmptyText(),
    help="Draft model to check against the settings' model_path: a directory, or a hub id in the local HF cache.",
)  # fmt: skip
@options.json_output
def probe_command(sglang, config, assignments, profile, arch, compute_capability, topology, draft, as_json):
    """Check, from SGLang's source, that it can serve ARCH with speculative decoding.

    No GPU, no weights: it finds every method the speculative path calls on the
    target model and checks the target class provides it, then reports what the
    requested all-reduce optimisations (the settings') will do on the given GPU generation.
    With --draft: whether the draft fits the target (model_path) and this SGLang, and which
    target layers it will see (see docs/draft-checks.md).
    """
    server = load_settings(config, assignments, profile)
    tree = release.resolve(sglang)
    model = server.model_path
    try:
        if arch is None:
            given = draft_inputs.locate(model, "target model") if draft else None
            arch = speculative_support.DEFAULT_ARCH
            if given and given.directory:
                arch = draft_inputs.Fields(
                    draft_inputs.read_config(given.directory, "target model"), model
                ).architecture()
        found = gpus.query_topology(None, server.gpus_per_node) if topology is None else None
        result = speculative_support.probe_settings(
            tree, server, arch, compute_capability, topology or (found.kind if found else None),
            found.how if found else "--topology" if topology else None,
        )  # fmt: skip
        if draft is not None:
            result.draft = draft_check.check(tree, draft, model, algorithm=result.canonical_algorithm, target_arch=arch)
    except SourceLayoutError as err:
        raise BadInput(release.layout_problem(tree, err)) from None
    except ValueError as err:  # a compute capability or algorithm the source does not know
        raise BadInput(str(err)) from None
    if result.class_location is None:  # a typo or another model: bad input, not a missing patch
        raise BadInput(
            result.findings[0].message + "; --arch is the class name in the model's config.json 'architectures'"
        )
    click.echo(json.dumps(result.to_dict(), indent=2) if as_json else speculative_support.render_text(result))
    sys.exit(ExitStatus.OK if result.passed else ExitStatus.CHECK_FAILED)
