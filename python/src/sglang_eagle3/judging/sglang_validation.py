"""SGLang's own validation of the settings, run by preflight: what SGLang itself would refuse or change at start-up.

The argv and environment the server will get are handed to a process of SGLang's own interpreter
(sglang_validation_main.py), which runs the tree's own validation with the GPUs nvidia-smi reported. It catches
every refusal, including those no rule of settings_rules restates, in SGLang's own words and at its own file:line,
and reports the values SGLang silently changes among those the user set. It needs SGLang importable by this
interpreter and the model's config.json on this host (preflight downloads nothing); without them the finding says
NOT CHECKED and why, and the restated rules still judge the settings.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

from ..errors import shown
from ..host.gpus import Gpu
from ..models import draft_inputs
from ..serving.launch_plan import LaunchPlan
from ..serving.settings import TUNED_COMPUTE_CAPABILITY, ServerSettings
from ..source import validation_sites
from ..source.server_args import server_flags
from ..source.tree import SGLangTree
from .findings import Report, Status
from .settings_rules import Given, given_flags, tree_sites

NAME = "sglang checks"
# Failures the run still goes ahead after: the settings themselves (it says SGLang's own word on them) and the GPUs
# (a host without them is judged for the tuned host's, so a laptop's dry run gets SGLang's checks).
NOT_BLOCKING = ("settings", "extra_args", "gpus")
RULE = "sglang-own-checks"  # the name dispositions of the rule audit give this run
TIMEOUT = 300  # seconds; the run takes 10-30 s (importing SGLang and torch dominates)
# The tuned host's GPUs (8x RTX PRO 6000 Blackwell, nvidia-smi's figures): what the run is answered with when this
# host has none (a laptop's dry run), said in the finding.
TUNED_GPU = Gpu(0, "NVIDIA RTX PRO 6000 Blackwell Workstation Edition", TUNED_COMPUTE_CAPABILITY, "97887 MiB")


def model_here(settings: ServerSettings) -> str | None:
    """Why the target's config.json is not on this host (the run needs it), or None when it is."""
    try:
        found = draft_inputs.locate(settings.model_path, "model_path")
    except draft_inputs.DraftInputError as err:
        return str(err)
    if found.directory is None:
        return f"{settings.model_path} is {found.source}"
    if not (found.directory / "config.json").is_file():
        return f"{found.directory} has no config.json"
    return None


def check(
    result: Report, settings: ServerSettings, plan: LaunchPlan, tree: SGLangTree, gpus: list[Gpu], explicit: bool
) -> None:
    """Run SGLang's own validation on the launch plan's SGLang arguments and environment (see the module
    docstring); ``explicit``: the tree was named (--sglang), so it goes first on the run's import path."""
    blocking = [f.name for f in result.findings if f.status is Status.FAIL and f.name not in NOT_BLOCKING]
    if blocking:  # it takes seconds: run once the rest passes (settings refused are said again in SGLang's words)
        result.add(NAME, Status.NOT_CHECKED, f"SGLang's own checks are run once the rest passes; first fix what "
                   f"failed above ({', '.join(dict.fromkeys(blocking))})")  # fmt: skip
        return
    missing = model_here(settings)
    if missing:
        result.add(NAME, Status.NOT_CHECKED, f"SGLang's own checks need the model's config.json on this host: "
                   f"{missing} (fetch it with `sglang-eagle3 models fetch`); the restated rules above judged the "
                   "settings")  # fmt: skip
        return
    facts_from = gpus or [Gpu(i, TUNED_GPU.name, TUNED_GPU.compute_capability, TUNED_GPU.memory)
                          for i in range(settings.gpus_per_node)]  # fmt: skip
    facts = {"compute_capability": facts_from[0].compute_capability, "names": [g.name for g in facts_from],
             "memory_mib": [_mib(g.memory) for g in facts_from]}  # fmt: skip
    request = {"argv": plan.args, "facts": facts, "modules": validation_sites.imported_by_validation(tree)}
    outcome = run(request, plan, tree, explicit)
    judge(result, outcome, settings, plan, tree, assumed=not gpus)


def _mib(memory: str) -> int | None:
    """nvidia-smi's memory.total ("97887 MiB") in MiB; None where it reports none ("[N/A]", as on GPUs whose memory
    is the host's): the run then says SGLang needed it, if it does."""
    number = memory.split()[0] if memory.split() else ""
    return int(number) if number.isdigit() else None


def run(request: dict, plan: LaunchPlan, tree: SGLangTree, explicit: bool) -> dict:
    """The outcome sglang_validation_main printed (its last line), or {"stage": "run", "error": ...}. It runs in
    the environment the server gets (the plan's, over this one), offline."""
    env = {**os.environ, **plan.env, "HF_HUB_OFFLINE": "1"}
    if explicit:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(tree.root), env.get("PYTHONPATH")]))
    command = [sys.executable, "-m", "sglang_eagle3.judging.sglang_validation_main"]
    try:
        done = subprocess.run(command, input=json.dumps(request), capture_output=True, text=True, env=env,
                              timeout=TIMEOUT)  # fmt: skip
    except subprocess.TimeoutExpired:
        return {"stage": "run", "error": f"it did not finish in {TIMEOUT} s"}
    except OSError as err:
        return {"stage": "run", "error": f"{command[0]}: {err.strerror or err}"}
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    try:
        return json.loads(lines[-1])
    except (IndexError, json.JSONDecodeError):
        tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or [f"exit status {done.returncode}"]
        return {"stage": "run", "error": tail[0][-300:]}


def judge(
    result: Report, outcome: dict, settings: ServerSettings, plan: LaunchPlan, tree: SGLangTree, assumed: bool = False
) -> None:
    """The run's outcome as findings: FAIL naming the settings behind SGLang's refusal, WARN for each value the
    user set that SGLang changes, OK; NOT CHECKED when it could not run."""
    version = f"SGLang {tree.version}"
    stage = outcome.get("stage")
    on = " (judged for the tuned host's GPUs: this host reported none)" if assumed else ""
    if stage in ("import", "run"):
        result.add(NAME, Status.NOT_CHECKED, f"{version}'s own checks could not run with {sys.executable}: "
                   f"{outcome.get('error')}; only the restated rules above judged the settings")  # fmt: skip
        return
    if "missing_fact" in outcome:
        result.add(NAME, Status.NOT_CHECKED, f"{version}'s own checks need {outcome['missing_fact']}, which "
                   "preflight did not get from nvidia-smi", outcome.get("where"))  # fmt: skip
        return
    given = given_flags(settings, plan.args, server_flags(tree))
    if stage != "done":
        where = outcome.get("where")
        if stage == "parse":
            where = _parser_site(tree, outcome.get("error", "")) or where
        named = _named(given, tree, where, outcome.get("error", ""))
        step = {"parse": "its parser", "resolve": "its resolution of the arguments", "check": "check_server_args"}
        result.add(
            NAME, Status.FAIL,
            f"{version} refuses these settings ({step.get(stage, stage)}, before any weights load): "
            f"{outcome.get('error', '').rstrip('.')}. {named}{on}",
            where,
        )  # fmt: skip
        return
    changed = outcome.get("rewritten", [])
    for change in changed:
        setting = next((g.setting for g in given if g.sets(change["field"])), change["field"])
        at = " (the line it is changed at follows)" if change.get("where") else ""
        given, now = shown(change["given"]), shown(change["now"])
        result.add(NAME, Status.WARN, f"{setting}: {version} changes it from {given} to {now} while it resolves "
                   f"its arguments, so the server runs with {now}, not what the settings say{at}",
                   change.get("where"))  # fmt: skip
    if not changed:
        result.add(NAME, Status.OK, f"{version}'s own parser, resolution and check_server_args take these "
                   f"settings, and change none of the values set{on}")  # fmt: skip


def _parser_site(tree: SGLangTree, error: str) -> str | None:
    """The file:line of the flag argparse names (``argument --attention-backend: invalid choice: ...``)."""
    flag = error.split("argument ", 1)[1].split(":", 1)[0].split("/")[0] if "argument " in error else None
    return next((s.where for s in tree_sites(tree) if s.kind in ("choices", "type") and s.flag == flag), None)


def _named(given: list[Given], tree: SGLangTree, where: str | None, error: str) -> str:
    """Which of the user's settings the refusal is about: the fields its statement and conditions name (or the
    flag argparse names), among those set."""
    fields = validation_sites.fields_named(tree, where) if where else set()
    involved = [g for g in given if any(g.sets(f) for f in fields) or any(s in error for s in g.spellings)]
    if not involved:
        return "None of the settings set is named there: it follows from the model or SGLang's defaults"
    return "Change " + ", ".join(dict.fromkeys(_shown(g) for g in involved))


def _shown(given: Given) -> str:
    """``speculative_eagle_topk (4)``, ``extra_args --page-size 16``, ``trust_remote_code``."""
    if given.value is None:
        return given.setting
    if given.setting.startswith("extra_args"):
        return f"{given.setting} {given.value}"
    return f"{given.setting} ({given.value})"
