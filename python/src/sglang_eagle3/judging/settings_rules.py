"""The settings against the SGLang tree that will run them: every flag and variable they give must be one this
tree has (read from its parser and srt/environ.py), and extra_args must be flags of its parser."""

from __future__ import annotations

import difflib

from .. import SGLANG_VERSIONS
from ..serving import settings as server_settings
from ..serving.launch_plan import sglang_args
from ..serving.settings import ServerSettings, field_flag
from ..source import sglang_source
from .findings import Report, Status

# Where SGLang's parser is read from (sglang_source.server_flags): 0.5.9 adds each flag in server_args.py, later
# releases derive most from the fields of srt/arg_groups/fields/.
PARSER = "its parser: srt/server_args.py ServerArgs.add_cli_args"
SPEC_V2 = "SGLANG_ENABLE_SPEC_V2"  # 0.5.9: top-k 1 only (settings.SPEC_TREE_RULES["spec_v2"])


def check_settings_version(result: Report, settings: ServerSettings, tree: sglang_source.SGLangTree) -> None:
    """Every setting SGLang gets (a flag, or a variable of its environ.py) must be one this SGLang has: a flag it
    lacks stops it at start-up, a variable it lacks is silently ignored. Read from the tree's own source."""
    try:
        known, variables = sglang_source.server_flags(tree), sglang_source.environment_variables(tree)
    except sglang_source.SGLangNotFound as err:
        result.add("settings", Status.FAIL, str(err))
        return
    rendered = set(sglang_args(settings))
    problems = []
    for name, value in settings:
        flag, env = field_flag(name), server_settings.field_env(name)
        missing = (flag in rendered and flag not in known) or (env and value is True and env not in variables)
        if not missing:
            continue
        version, where = server_settings.field_origin(name)
        what = f"no flag {flag} ({PARSER})" if flag else f"no variable {env} (srt/environ.py, class Envs)"
        close = difflib.get_close_matches(flag, list(known), n=1) if flag else []
        instead = f"; its nearest flag is {close[0]} (put it in extra_args)" if close else ""
        problems.append(
            f"{name}: SGLang {tree.version} has {what}; it is in SGLang {version}"
            f"{f' ({where})' if where else ''}{instead}. Unset {name}, or use the {version} stack: "
            f"nix run .#{server_settings.stack_app(version)}"
        )
    for variable in sorted(v for v in settings.environment if v.startswith("SGLANG_") and v not in variables):
        if not variable.startswith(ENV_TOOL_PREFIX) and not _mentioned(tree, variable):
            problems.append(
                f"environment: SGLang {tree.version} does not read {variable} (not in srt/environ.py's Envs nor "
                f"anywhere in its source): it would be silently ignored; drop it or check its name"
            )
    # A version's own rule on a variable, only where that version reads it (0.5.23 refuses the variable above).
    if SPEC_V2 in variables and settings.speculative_algorithm:
        problem = server_settings.draft_tree_problem(
            settings.speculative_num_steps, settings.speculative_eagle_topk, settings.speculative_num_draft_tokens,
            settings.attention_backend, settings.environment.get(SPEC_V2),
        )  # fmt: skip
        problems += [problem] if problem else []
    if problems:
        result.add("settings", Status.FAIL, "; ".join(problems))
    elif tree.version not in SGLANG_VERSIONS:
        result.add("settings", Status.NOT_CHECKED, f"SGLang {tree.version or '(unknown version)'} is none of the "
                   f"versions the settings are written for ({', '.join(SGLANG_VERSIONS)}); its flags were read from "
                   "its source and every rendered one is there, but their meaning is not checked")  # fmt: skip
    else:
        result.add("settings", Status.OK, f"every flag and variable the settings give is one SGLang {tree.version} has")


ENV_TOOL_PREFIX = "SGLANG_EAGLE3_"


def _mentioned(tree: sglang_source.SGLangTree, variable: str) -> bool:
    """Whether any of SGLang's Python files names the variable (read with os.environ rather than Envs)."""
    needle = variable.encode()
    return any(needle in path.read_bytes() for path in tree.package.rglob("*.py"))


def check_extra_args(result: Report, settings: ServerSettings, tree: sglang_source.SGLangTree) -> None:
    """extra_args must be flags this SGLang knows, and not ones a setting already owns."""
    if not settings.extra_args:
        return
    try:
        known = sglang_source.server_flags(tree)
    except sglang_source.SGLangNotFound as err:
        result.add("extra_args", Status.FAIL, str(err))
        return
    owned = {field_flag(name) for name in ServerSettings.model_fields} - {None}
    owned_spellings = {spelling: flag for flag in owned if flag in known for spelling in known[flag][0]}
    args = list(settings.extra_args)
    while args:
        token = args.pop(0)
        name, has_inline_value = token.split("=", 1)[0], "=" in token
        if not name.startswith("--"):
            result.add(
                "extra_args", Status.FAIL, f"{token!r} is not a flag; extra_args are SGLang flags and their values"
            )
            return
        if name not in known:
            close = difflib.get_close_matches(name, list(known), n=1)
            hint = f"; did you mean {close[0]}?" if close else ""
            result.add(
                "extra_args", Status.FAIL,
                f"SGLang {tree.version} has no flag {name}{hint} ({PARSER}; flags differ between SGLang versions: "
                "use one that this SGLang's `python -m sglang.launch_server --help` lists)",
            )  # fmt: skip
            return
        if name in owned_spellings:
            setting = next(n for n in ServerSettings.model_fields if field_flag(n) == owned_spellings[name])
            result.add("extra_args", Status.FAIL, f"{name} is the setting {setting!r}; set it there, not in extra_args")
            return
        if known[name][1] and not has_inline_value:
            if not args or args[0].startswith("--"):
                result.add("extra_args", Status.FAIL, f"{name} needs a value")
                return
            args.pop(0)
    result.add("extra_args", Status.OK, " ".join(settings.extra_args))
