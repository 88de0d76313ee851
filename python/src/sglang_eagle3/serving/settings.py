"""The one definition of the EAGLE-3 server's settings.

Every field is declared once, here: its type, default and documentation. A field is
SGLang's own argument of the same name (``tp_size`` renders to ``--tp-size``) unless it
is marked LAUNCHER_ONLY (files, timeouts and the like that the launcher itself uses).
The CLI's help, the JSON Schema (used by the NixOS module), docs/serve.md's settings
reference and the argv given to SGLang are all generated from it.

The built-in defaults are the users' tuned configuration (96.1 tok/s single-stream on
8x RTX PRO 6000): Kimi-K2.5 NVFP4 + AQ-MedAI EAGLE-3 draft, tp 8, 3 steps / top-k 1 /
4 draft tokens, FlashInfer attention, torch symm mem and FlashInfer allreduce fusion.

Where values come from, later wins:
  1. the built-in defaults below
  2. the settings file (--config FILE, JSON or TOML)
  3. environment variables SGLANG_EAGLE3_<FIELD> (e.g. SGLANG_EAGLE3_TP_SIZE=4)
  4. --set field=value on the command line
  5. the profile: "baseline" turns speculation off (the A/B partner for benchmarks)
"""

from __future__ import annotations

import difflib
import functools
import json
import os
import re
import tomllib
from pathlib import Path
from typing import Any, Literal, get_args

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictFloat,
    StrictInt,
    ValidationError,
    field_validator,
    model_validator,
)

from .. import SGLANG_VERSION
from ..errors import BadInput, shown, shown_path
from .credentials import PATH_FLAGS, SECRET_ARGS, inline_secret_in, secret_flag_in

ENV_PREFIX = "SGLANG_EAGLE3_"
PROFILES = ("eagle3", "baseline")
SpeculativeAlgorithm = Literal["EAGLE3", "EAGLE", "NEXTN", "STANDALONE"]
ALGORITHMS: tuple[str, ...] = get_args(SpeculativeAlgorithm)
# The GPUs the defaults are tuned for (RTX PRO 6000 Blackwell, SM120): what the probe judges the
# all-reduce settings on when no GPU is there to ask. Not a setting: SGLang reads it from the GPU.
TUNED_COMPUTE_CAPABILITY = "12.0"
# SGLANG_EAGLE3_* variables that configure the tools, not the server: the settings file (options.py), the
# patch series (source/patchset.py), nvidia-smi and the driver library preflight judges (judging/preflight.py),
# tracebacks (cli_common.py). The tests' own variables are EAGLE3_TESTS_*, a prefix this loader does not read
# (tests/support/harness_env.py).
NOT_SETTINGS = {"config", "patches", "nvidia_smi", "libcuda", "traceback"}
# A variable name every consumer of `environment` takes: the process environment (no "=", not empty), systemd's
# Environment= (the NixOS module) and Kubernetes' env (the manifests). POSIX's portable names.
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class SettingsError(BadInput):
    """Settings that cannot be used; the message names the field and what to do."""


# The mark of a field that is not an SGLang argument. In the JSON Schema every field carries
# "sglang_flag": its flag, or null for these (nix/settings-options.nix reads it from there).
LAUNCHER_ONLY = {"sglang_flag": None}


def _schema_flags(schema: dict, model: type[BaseModel]) -> None:
    for name, prop in schema["properties"].items():
        prop["sglang_flag"] = field_flag(name)


class ServerSettings(BaseModel):
    """Settings of one SGLang server started by `sglang-eagle3 serve`."""

    # Strict where lax parsing would guess: no inf/nan, and numbers are numbers (StrictInt, StrictFloat:
    # `--set tp_size=true` is an error, not 1).
    model_config = ConfigDict(
        extra="forbid", validate_assignment=True, allow_inf_nan=False, json_schema_extra=_schema_flags
    )

    # -- the model ---------------------------------------------------------------------
    model_path: str = Field(
        "nvidia/Kimi-K2.5-NVFP4",
        description="Target model: a Hugging Face id or a local directory holding config.json.",
    )
    revision: str | None = Field(
        None, description="Hub revision of model_path; a 40-hex commit sha pins it (a branch or tag can move)."
    )
    served_model_name: str | None = Field(None, description="Model name reported by the API (default: model_path).")
    trust_remote_code: bool = Field(True, description="Allow the model's own code from the hub (Kimi-K2.5 needs it).")
    context_length: StrictInt | None = Field(None, ge=1, description="Maximum context length (default: the model's).")

    # -- speculative decoding ------------------------------------------------------------
    speculative_algorithm: SpeculativeAlgorithm | None = Field(
        "EAGLE3", description="Speculative decoding algorithm; null turns speculation off."
    )
    speculative_draft_model_path: str | None = Field(
        "AQ-MedAI/Kimi-K25-eagle3", description="EAGLE-3 draft model (Llama architecture): hub id or local directory."
    )
    speculative_draft_model_revision: str | None = Field(
        None, description="Hub revision of the draft model; a 40-hex commit sha pins it."
    )
    speculative_num_steps: StrictInt = Field(3, ge=1, description="Draft steps per verification.")
    speculative_eagle_topk: StrictInt = Field(1, ge=1, description="Branching factor of the draft tree (1 = a chain).")
    speculative_num_draft_tokens: StrictInt = Field(
        4, ge=2, description="Tokens verified per step; with top-k 1 it must be steps + 1."
    )
    speculative_draft_attention_backend: str | None = Field(
        None, description="Attention backend of the draft model (default: SGLang's choice)."
    )

    # -- parallelism and memory -----------------------------------------------------------
    tp_size: StrictInt = Field(8, ge=1, description="Tensor parallel size: GPUs per model replica.")
    nnodes: StrictInt = Field(1, ge=1, description="Number of hosts the model spans.")
    node_rank: StrictInt = Field(0, ge=0, description="This host's rank among nnodes.")
    dist_init_addr: str | None = Field(None, description="host:port of node 0 for multi-host rendezvous.")
    mem_fraction_static: StrictFloat | None = Field(
        None, gt=0, lt=1, description="Fraction of GPU memory for weights and KV cache."
    )
    cuda_graph_max_bs: StrictInt | None = Field(None, ge=1, description="Largest batch size captured in CUDA graphs.")
    max_running_requests: StrictInt | None = Field(
        None, ge=1, description="Concurrent requests cap (SGLang uses 48 with speculation)."
    )

    # -- kernels and communication ------------------------------------------------------------
    attention_backend: str = Field("flashinfer", description="Attention backend of the target model.")
    enable_torch_symm_mem: bool = Field(
        True, description="All-reduce through torch symmetric memory (SM120 needs patch 0002)."
    )
    enable_flashinfer_allreduce_fusion: bool = Field(
        True, json_schema_extra={"multi_node_default": False},
        description="FlashInfer allreduce+RMSNorm fusion (SM120: opt-in patch 0003, may not work). One node only: "
        "preflight refuses it with nnodes > 1, where the NixOS module and the Kubernetes manifests default it to "
        "false.",
    )  # fmt: skip
    pcie_ipc_allreduce: bool = Field(
        False, json_schema_extra={"sglang_flag": None, "sglang_env": "SGLANG_ENABLE_PCIE_IPC_ALLREDUCE",
                                  "sglang_version": "0.5.23", "sglang_where": "srt/environ.py:1539"},
        description="FlashInfer PCIe-IPC all-reduce for GPUs without NVLink (SGLang 0.5.23 and later, upstream PR "
        "#34528: TPOT 21.14 -> 13.62 ms at TP8 on 8x SM120, as reported there); sets "
        "SGLANG_ENABLE_PCIE_IPC_ALLREDUCE=1 for the server.",
    )  # fmt: skip

    # -- serving ---------------------------------------------------------------------------
    host: str = Field("127.0.0.1", description="Address the HTTP server listens on.")
    port: StrictInt = Field(30000, ge=1, le=65535, description="HTTP port.")
    enable_metrics: bool = Field(True, description="Prometheus metrics at /metrics (acceptance length gauges).")

    # -- the launcher's own (LAUNCHER_ONLY: not SGLang arguments) ------------------------------
    api_key_file: Path | None = Field(
        None, description="File holding the API key (never the key itself; mode 600). Under systemd, "
        "$CREDENTIALS_DIRECTORY/api-key is used when this is unset.", json_schema_extra=LAUNCHER_ONLY,
    )  # fmt: skip
    admin_api_key_file: Path | None = Field(
        None, description="File holding the admin API key of SGLang's management endpoints (mode 600). Under "
        "systemd, $CREDENTIALS_DIRECTORY/admin-api-key is used when this is unset.", json_schema_extra=LAUNCHER_ONLY,
    )  # fmt: skip
    ssl_keyfile_password_file: Path | None = Field(
        None, description="File holding the password of an encrypted --ssl-keyfile (mode 600; SGLang 0.5.23). Under "
        "systemd, $CREDENTIALS_DIRECTORY/ssl-keyfile-password is used when this is unset.",
        json_schema_extra=LAUNCHER_ONLY,
    )  # fmt: skip
    extra_args: list[str] = Field(
        default_factory=list,
        description="More SGLang arguments, checked by SGLang's parser.",
        json_schema_extra=LAUNCHER_ONLY,
    )
    environment: dict[str, str] = Field(
        default_factory=dict,
        description="Extra environment variables for the server process.",
        json_schema_extra=LAUNCHER_ONLY,
    )
    # Two hours: a cold first start reads a 600 GB checkpoint, JIT-compiles FlashInfer's kernels and
    # captures CUDA graphs (tens of minutes); a timeout restarts the unit, which starts all over again.
    ready_timeout: StrictFloat = Field(
        7200, gt=0, le=7 * 86400, json_schema_extra=LAUNCHER_ONLY,
        description="Seconds to wait for /health_generate after start (a first start loads 600 GB, "
        "JIT-compiles FlashInfer kernels and captures CUDA graphs).",
    )  # fmt: skip
    stop_timeout: StrictFloat = Field(
        60, gt=0, le=3600, json_schema_extra=LAUNCHER_ONLY,
        description="Seconds SGLang gets to stop after SIGTERM/SIGINT before its process group is killed (SIGKILL).",
    )  # fmt: skip

    @field_validator("environment")
    @classmethod
    def _environment_names(cls, environment: dict[str, str]) -> dict[str, str]:
        # The name only: the value may be a secret. Every command loads settings here, so all refuse it alike.
        for name in environment:
            if not ENV_NAME.fullmatch(name):
                raise ValueError(
                    f"{shown(name)} is not an environment variable name; use letters, digits and _, not starting "
                    "with a digit (e.g. MY_VARIABLE)"
                )
        return environment

    @model_validator(mode="before")
    @classmethod
    def _no_nul(cls, values: Any) -> Any:
        def has_nul(value: Any) -> bool:
            if isinstance(value, dict):
                return any(has_nul(k) or has_nul(v) for k, v in value.items())
            if isinstance(value, list):
                return any(has_nul(v) for v in value)
            return "\0" in str(value)

        if isinstance(values, dict):
            for name, value in values.items():
                if has_nul(value):
                    raise ValueError(f"{name}: contains a NUL character")
        return values

    @model_validator(mode="after")
    def _consistent(self) -> ServerSettings:
        if self.speculative_algorithm in ("EAGLE3", "EAGLE", "STANDALONE") and not self.speculative_draft_model_path:
            raise ValueError(
                f"speculative_draft_model_path: {self.speculative_algorithm} needs a draft model "
                "(e.g. AQ-MedAI/Kimi-K25-eagle3); SGLang 0.5.9 does not pick one for Kimi-K2.5: it would load the "
                f"target itself as the draft ({DRAFT_PATH_FALLBACK}) and fail after the whole target has loaded"
            )
        if self.speculative_algorithm:
            # The tree's shape only: the rules that depend on the backend or the environment differ between
            # stacks, and preflight applies them with the running tree's own lines (judging/settings_rules.py).
            problem = draft_tree_problem(
                self.speculative_num_steps, self.speculative_eagle_topk, self.speculative_num_draft_tokens
            )
            if problem:
                raise ValueError(problem)
        if self.node_rank >= self.nnodes:
            raise ValueError(f"node_rank: {self.node_rank} must be below nnodes ({self.nnodes})")
        if self.nnodes > 1 and not self.dist_init_addr:
            raise ValueError("dist_init_addr: more than one node needs the rendezvous address host:port of node 0")
        if self.tp_size % self.nnodes:
            raise ValueError(f"tp_size: {self.tp_size} must split evenly over nnodes ({self.nnodes})")
        if self.dist_init_addr is not None:
            host, _, port = self.dist_init_addr.rpartition(":")
            if not host or not port.isdigit() or not 1 <= int(port) <= 65535:
                raise ValueError("dist_init_addr: expected host:port of node 0, e.g. 10.0.0.1:50000")
        for arg in self.extra_args:
            if secret := secret_flag_in(arg):
                # The message names the flag only: the next argument may be the key.
                raise ValueError(
                    f"extra_args: do not pass {secret.flag} (it would show in process lists and logs); "
                    f"put the key in a file (chmod 600) and set {secret.setting}"
                )
        if flag := inline_secret_in(self.extra_args):
            raise ValueError(
                f"extra_args: {flag} is given its JSON, keys included (it would show in process lists and logs); "
                f"give it {PATH_FLAGS[flag]}"
            )
        return self

    @property
    def gpus_per_node(self) -> int:
        return self.tp_size // self.nnodes


def default(name: str) -> Any:
    """A setting's built-in default: the one place it is defined, for every command that restates it."""
    return ServerSettings.model_fields[name].get_default(call_default_factory=True)


# Where SGLang 0.5.9 takes the target's model_path for a draft path that is not set (ModelConfig.from_server_args).
DRAFT_PATH_FALLBACK = "srt/configs/model_config.py:251"
# SGLang 0.5.9's own rules for the draft tree's shape (steps x top-k -> draft tokens), with where they are. A setting
# SGLang would silently change or refuse (after reading the model config) is refused here, up front.
SPEC_TREE_RULES = {
    "topk1": "srt/server_args.py:2443-2450",  # top-k 1: num_draft_tokens := steps + 1, with a warning
    "tree": "srt/speculative/eagle_utils.py:27",  # torch.topk(scores, num_draft_tokens - 1): the tree's size
}


def draft_tree_problem(steps: int, topk: int, tokens: int) -> str | None:
    """What SGLang 0.5.9 would refuse or silently change about the draft tree's shape, or None."""
    if topk == 1 and tokens != steps + 1:
        return (
            f"speculative_num_draft_tokens: with speculative_eagle_topk 1 it must be speculative_num_steps + 1 = "
            f"{steps + 1}, not {tokens} (SGLang 0.5.9 would silently change it: {SPEC_TREE_RULES['topk1']})"
        )
    # The draft tree: top-k scores at the first step, top-k x top-k at each later one; SGLang picks
    # num_draft_tokens - 1 of them with torch.topk, which fails at the first draft step if there are fewer.
    limit = topk + (steps - 1) * topk * topk + 1
    if tokens > limit:
        return (
            f"speculative_num_draft_tokens: {tokens} cannot be filled by top-k {topk} over {steps} steps (at most "
            f"speculative_eagle_topk + (speculative_num_steps - 1) x speculative_eagle_topk^2 + 1 = {limit}; SGLang "
            f"0.5.9 fails at the first draft step: {SPEC_TREE_RULES['tree']})"
        )
    return None


def _extra(name: str) -> dict:
    extra = ServerSettings.model_fields[name].json_schema_extra
    return extra if isinstance(extra, dict) else {}


def field_flag(name: str) -> str | None:
    """The SGLang flag of a setting: ``--`` + its name with dashes; None for LAUNCHER_ONLY and environment ones."""
    if "sglang_flag" in _extra(name):
        return None
    return "--" + name.replace("_", "-")


def multi_node_defaults() -> dict[str, Any]:
    """The defaults of a model that spans several hosts (nnodes > 1), where they differ from the one-node ones:
    settings SGLang keeps to one node (enable_flashinfer_allreduce_fusion). The NixOS module (through the schema's
    ``multi_node_default``) and kubernetes/generate.py apply them; preflight refuses the one-node value."""
    return {name: _extra(name)["multi_node_default"] for name in ServerSettings.model_fields
            if "multi_node_default" in _extra(name)}  # fmt: skip


def field_env(name: str) -> str | None:
    """The SGLang environment variable a setting sets to 1 when true (pcie_ipc_allreduce), or None."""
    return _extra(name).get("sglang_env")


def field_origin(name: str) -> tuple[str, str | None]:
    """(the SGLang version a setting is written for, where it is in that version's source if not the default's).

    SGLang's flags and variables differ between versions; preflight reads the installed tree's parser and
    environ.py and refuses a setting it lacks, naming this version (tests check it against the real wheels).
    """
    return _extra(name).get("sglang_version", SGLANG_VERSION), _extra(name).get("sglang_where")


def stack_app(version: str) -> str:
    """The flake app that serves with a given SGLang version: serve-eagle3 (0.5.9), serve-eagle3-0_5_23 (dots
    would split Nix attribute paths)."""
    return "serve-eagle3" if version == SGLANG_VERSION else "serve-eagle3-" + version.replace(".", "_")


def _parse_value(name: str, raw: str) -> Any:
    """`--set` and environment values: JSON when they parse as JSON (8, true, null, [..]), else text.

    A text setting keeps its text: `served_model_name=1234` is the name "1234".
    """
    try:
        value = json.loads(raw)
    except ValueError:  # not JSON, or a number of more than Python's 4,300 digits: text, which the field judges
        return raw
    if isinstance(value, (bool, int, float)) and _takes_text(name):
        return raw
    return value


@functools.cache
def _takes_text(name: str) -> bool:
    prop = ServerSettings.model_json_schema()["properties"][name]
    return any(v.get("type") == "string" for v in prop.get("anyOf", [prop]))


def _check_keys(keys, source: str) -> None:
    known = list(ServerSettings.model_fields)
    for key in keys:
        if key not in known:
            secret = next((s for s in SECRET_ARGS if key == s.field), None)
            if secret is not None:
                raise SettingsError(
                    f"{source}: the key itself is never a setting (it would show in files, process lists and "
                    f"logs); put it in a file (chmod 600) and set {secret.setting}, or under systemd use "
                    f"LoadCredential={secret.credential}:FILE"
                )
            close = difflib.get_close_matches(str(key), known, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else f"; known settings: {', '.join(known)}"
            raise SettingsError(f"{source}: unknown setting {shown(key)}{hint}")


def read_file(path: Path) -> dict:
    if path.exists() and not path.is_file():  # a FIFO or device would block or never end
        raise SettingsError(f"settings file {shown_path(path)} is not a regular file")
    try:
        text = path.read_text()
    except OSError as err:
        raise SettingsError(f"cannot read settings file {shown_path(path)}: {err.strerror}") from None
    except UnicodeDecodeError:
        raise SettingsError(
            f"settings file {shown_path(path)} is not UTF-8 text; save it as UTF-8 (JSON or TOML)"
        ) from None
    formats = "the file name's extension picks the format: .toml is read as TOML, any other as JSON"
    if path.suffix.lower() in (".yaml", ".yml"):
        raise SettingsError(f"settings file {shown_path(path)}: YAML is not read; write it as JSON or TOML ({formats})")
    try:
        data = tomllib.loads(text) if path.suffix == ".toml" else json.loads(text, object_pairs_hook=_no_duplicates)
    except (tomllib.TOMLDecodeError, ValueError) as err:  # ValueError: JSON's, or a number of over 4,300 digits
        kind = "TOML" if path.suffix == ".toml" else "JSON"
        raise SettingsError(f"{shown_path(path)} is not valid {kind}: {err} ({formats})") from None
    except SettingsError as err:  # a key given twice
        raise SettingsError(f"{shown_path(path)}: {err}") from None
    if not isinstance(data, dict):
        raise SettingsError(f"{shown_path(path)}: expected a table/object of settings at the top level")
    _check_keys(data, str(path))
    return data


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict:
    """A JSON object, refused when a key is given twice (TOML refuses it too; JSON would keep the last)."""
    data: dict = {}
    for key, value in pairs:
        if key in data:
            raise SettingsError(f"setting {shown(key)} is given twice; keep one (TOML refuses it too)")
        data[key] = value
    return data


def from_environment(environ: dict[str, str]) -> dict:
    values = {}
    for key, raw in environ.items():
        if key.startswith(ENV_PREFIX):
            name = key[len(ENV_PREFIX) :].lower()
            if name in NOT_SETTINGS:
                continue
            _check_keys([name], f"environment variable {key}")
            values[name] = _parse_value(name, raw)
    return values


def from_assignments(assignments: list[str], option: str = "--set") -> dict:
    """``option``'s FIELD=VALUE items (``--set``, or bench ab's ``--a-set``/``--b-set``, which messages name)."""
    values = {}
    for item in assignments:
        # Messages show the field, never the value: it may be a secret typed in the wrong place.
        if "=" not in item:
            raise SettingsError(f"{option} expects field=value, e.g. {option} tp_size=4")
        key, raw = item.split("=", 1)
        _check_keys([key.strip()], f"{option} {shown(key.strip())[1:-1]}=...")
        values[key.strip()] = _parse_value(key.strip(), raw)
    return values


def load(
    config: Path | None = None,
    assignments: list[str] | None = None,
    environ: dict[str, str] | None = None,
    profile: str = "eagle3",
) -> ServerSettings:
    """Settings from all sources, in the documented order (see the module docstring)."""
    if profile not in PROFILES:
        raise SettingsError(f"unknown profile {shown(profile)}; choose one of {', '.join(PROFILES)}")
    environ = os.environ if environ is None else environ
    values: dict = {}
    if config is not None:
        values.update(read_file(config))
    values.update(from_environment(environ))
    values.update(from_assignments(assignments or []))
    if profile == "baseline":
        values.update(speculative_algorithm=None, speculative_draft_model_path=None)
    try:
        return ServerSettings(**values)
    except ValidationError as err:
        raise SettingsError(describe(err)) from None


def describe(err: ValidationError) -> str:
    """Pydantic's errors as one line per field: 'tp_size: Input should be greater than or equal to 1 (got 0)'."""
    lines = []
    for e in err.errors():
        where = ".".join(str(p) for p in e["loc"])
        message = e["msg"].removeprefix("Value error, ")
        # The value is shown for plain fields only: extra_args and environment may hold secrets.
        plain = where and where.split(".")[0] not in ("extra_args", "environment")
        got = f" (got {shown(e['input'])})" if plain and "input" in e and not isinstance(e["input"], dict) else ""
        lines.append(f"{where}: {message}{got}" if where else message)
    return "invalid settings:\n  " + "\n  ".join(lines)


def json_schema() -> dict:
    return ServerSettings.model_json_schema()


def reference_markdown() -> str:
    """The settings reference table for docs/serve.md, generated from the definition."""
    rows = ["| setting | type | default | SGLang flag or variable | description |", "|---|---|---|---|---|"]
    schema = json_schema()["properties"]
    for name, info in ServerSettings.model_fields.items():
        prop = schema[name]
        kinds = [p.get("type", "enum" if "enum" in p else "?") for p in prop.get("anyOf", [prop])]
        default = info.get_default(call_default_factory=True)
        sglang = field_flag(name)
        rows.append(
            f"| `{name}` | {' or '.join(kinds)} | `{json.dumps(default, default=str)}` | "
            f"{f'`{sglang}`' if sglang else f'`{field_env(name)}=1`' if field_env(name) else '(launcher)'} | "
            f"{info.description} |"
        )
    return "\n".join(rows)
