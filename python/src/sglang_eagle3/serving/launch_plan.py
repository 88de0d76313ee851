"""The launch plan: settings -> the exact SGLang command line and environment.

SGLang's own entry point is ``python -m sglang.launch_server ARGS``. When an API key
(or the admin key) is configured the launcher starts ``python -m sglang_eagle3.serving.sglang_main
ARGS`` instead: the same entry point, which reads the keys from their files, so they never
appear in argv, in the environment or in logs (see sglang_main.py and credentials.py).
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from . import credentials
from .settings import ServerSettings, field_env, field_flag


def sglang_args(settings: ServerSettings) -> list[str]:
    """The SGLang arguments, in field order: flags for true booleans, nothing for unset values."""
    args: list[str] = []
    for name, value in settings:
        flag = field_flag(name)
        if flag is None or value is None or value is False:
            continue
        if name.startswith("speculative_") and settings.speculative_algorithm is None:
            continue  # the baseline: no speculative flags at all
        if value is True:
            args.append(flag)
        else:
            args += [flag, str(value)]
    return args + list(settings.extra_args)


def sglang_env(settings: ServerSettings) -> dict[str, str]:
    """The SGLang variables of settings that are switches in its environment, not flags (pcie_ipc_allreduce)."""
    return {field_env(name): "1" for name, value in settings if field_env(name) and value is True}


@dataclass
class LaunchPlan:
    """What the launcher starts, built once from the settings: preflight judges this very plan (its SGLang
    arguments and environment), and the launcher runs it."""

    argv: list[str]
    env: dict[str, str]  # only what the launcher adds to the inherited environment
    key_files: dict[str, Path] = field(default_factory=dict)  # SGLang's secret field -> the file holding it
    sglang_argv: list[str] = field(default_factory=list)  # the equivalent python -m sglang.launch_server argv
    args: list[str] = field(default_factory=list)  # SGLang's arguments (sglang_args): what its parser gets
    health_url: str = ""  # where the launcher asks whether the server is ready (health_url)

    def shell(self) -> str:
        return shlex.join(self.argv)


def build(settings: ServerSettings, python: str | None = None, environ: dict[str, str] | None = None) -> LaunchPlan:
    """The plan for ``settings``. The key files are checked here, the one place: each file the settings name (or
    systemd hands over, ``environ``'s $CREDENTIALS_DIRECTORY) is read as the server will read it, and one that cannot
    be used is credentials.KeyFileError, bad input (exit 2) in every command, before anything runs (never the key)."""
    python = python or sys.executable
    environ = os.environ if environ is None else environ
    args = sglang_args(settings)
    env = {**sglang_env(settings), **settings.environment}
    sglang_argv = [python, "-m", "sglang.launch_server", *args]
    key_files = {}
    for secret in credentials.SECRET_ARGS:
        path = credentials.key_file(secret, getattr(settings, secret.setting), environ)
        if path is not None:
            credentials.read_key(path, secret.setting)  # KeyFileError: bad input
            key_files[secret.field] = path
            env[secret.env] = str(path)  # the path, never the key
    argv = [python, "-m", "sglang_eagle3.serving.sglang_main", *args] if key_files else sglang_argv
    return LaunchPlan(argv, env, key_files, sglang_argv, args, health_url(settings))


FIND_SGLANG = (
    "import importlib.util as u; s = u.find_spec('sglang'); "
    "print(next(iter(s.submodule_search_locations or []), '') if s else '')"
)


def imported_sglang(plan: LaunchPlan) -> Path | None:
    """The sglang package the plan's command imports: its Python asked with the plan's environment (settings'
    `environment` may set PYTHONPATH), without importing it. None: that Python finds none."""
    try:
        done = subprocess.run([plan.argv[0], "-c", FIND_SGLANG], env={**os.environ, **plan.env},
                              capture_output=True, text=True, timeout=60)  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        return None
    found = done.stdout.strip()
    return Path(found).resolve() if done.returncode == 0 and found else None


def base_url(settings: ServerSettings) -> str:
    """Where clients on this host reach the server (a wildcard listen address becomes loopback)."""
    host = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}.get(settings.host, settings.host)
    host = f"[{host}]" if ":" in host else host
    return f"http://{host}:{settings.port}"


def health_url(settings: ServerSettings) -> str:
    """Where the launcher (and the benchmark) ask whether the server is ready."""
    return f"{base_url(settings)}/health_generate"
