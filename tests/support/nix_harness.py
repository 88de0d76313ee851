"""The NixOS module and Nix code evaluated without nixpkgs: Nix itself, nixpkgs' real lib and the
locked uv2nix / pyproject.nix trees (the same staged inputs the flake evaluation uses, see
flake_eval.py), the module harness (tests/nix/module-harness.nix) and unit verification."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from support import flake_eval

REPO = flake_eval.REPO
NIX = shutil.which("nix-instantiate")
needs_nix = pytest.mark.skipif(NIX is None, reason="needs nix-instantiate (Debian: apt-get install nix-bin)")
# Given explicitly, or from the staged inputs.
_lib_tree = flake_eval.input_tree("nixpkgs.lib")
NIXPKGS_LIB = os.environ.get("NIXPKGS_LIB") or (str(_lib_tree / "lib") if _lib_tree else None)
UV2NIX_SRC = os.environ.get("UV2NIX_SRC") or str(flake_eval.input_tree("uv2nix") or "")
PYPROJECT_NIX_SRC = os.environ.get("PYPROJECT_NIX_SRC") or str(flake_eval.input_tree("pyproject-nix") or "")
if flake_eval.REQUIRED and not (NIX and NIXPKGS_LIB and UV2NIX_SRC and PYPROJECT_NIX_SRC):
    raise RuntimeError(
        f"EAGLE3_TESTS_REQUIRE_FLAKE_EVAL is set, but the inputs are not staged: {flake_eval.unavailable()}"
    )
needs_lib = pytest.mark.skipif(
    not (NIX and NIXPKGS_LIB),
    reason=f"needs nixpkgs' lib/: {flake_eval.HOW_TO_STAGE} (or set NIXPKGS_LIB=<nixpkgs>/lib)",
)


def nix_eval(expr: str, cwd: Path = REPO) -> object:
    result = subprocess.run([NIX, "--eval", "--strict", "--json", "-E", expr], capture_output=True, text=True, cwd=cwd)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


HARNESS = REPO / "tests" / "nix" / "module-harness.nix"
STANDIN_NIXOS = REPO / "tests" / "nix" / "nixpkgs" / "nixos" / "eval-config.nix"


def evaluate_module(config: str) -> dict:
    """The harness's view of a host with this module configuration (a Nix expression)."""
    return nix_eval(harness_call(config))


def evaluate_module_error(config: str) -> str:
    """Nix's error for a host that must not evaluate (a type error, a thrown message)."""
    result = subprocess.run(
        [NIX, "--eval", "--strict", "--json", "-E", harness_call(config)], capture_output=True, text=True
    )
    assert result.returncode != 0, result.stdout
    return result.stderr


def harness_call(config: str) -> str:
    return f"import {HARNESS} {{ libPath = {NIXPKGS_LIB}; config = ({config}); }}"


STORE_PROGRAM = re.compile(r"/nix/store/[a-z0-9]{32}-[^/\s]+/bin/[^\s\"]+")
# Keys NixOS's systemd knows and Debian 12's systemd 252 does not (they arrived in 254).
NEWER_THAN_252 = re.compile(r"^(RestartSteps|RestartMaxDelaySec)=.*\n", re.MULTILINE)


def render_unit(unit_text: str, exe_stub: Path) -> str:
    """A unit file as NixOS wrote it (the harness's `units`), its programs replaced by a stub.

    systemd-analyze verify checks that every Exec*= program exists; the packages here are
    stubs, so their store paths are pointed at an executable file. Nothing else changes.
    """
    lines = [
        STORE_PROGRAM.sub(str(exe_stub), line) if line.startswith("Exec") else line
        for line in unit_text.splitlines(keepends=True)
    ]
    text = "".join(lines)
    return text if systemd_version() >= 254 else NEWER_THAN_252.sub("", text)


def verify_unit(unit_text: str, name: str, tmp_path: Path, exe_stub: Path) -> float:
    """nix/scripts/verify-units.sh on the unit (what the flake's module checks run): its exposure."""
    unit = tmp_path / name
    unit.write_text(render_unit(unit_text, exe_stub))
    script = REPO / "nix" / "scripts" / "verify-units.sh"
    result = subprocess.run(["bash", str(script), str(unit)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    return float(re.search(rf"{re.escape(name)}: exposure ([0-9.]+)", result.stdout).group(1))


def systemd_version() -> int:
    out = subprocess.run(["systemd-analyze", "--version"], capture_output=True, text=True).stdout
    return int(re.match(r"systemd (\d+)", out).group(1))


def ollama_exposure(module: Path, tmp_path: Path, exe_stub: Path) -> float:
    """nixpkgs' ollama unit, rendered by the same NixOS stand-in as ours."""
    expr = f"""
      let lib = import {NIXPKGS_LIB};
          stub = {{ type = "derivation"; name = "ollama"; meta.mainProgram = "ollama"; override = _: stub;
                   outPath = "/nix/store/7a7a7a7a7a7a7a7a7a7a7a7a7a7a7a7a-ollama"; }};
          host = import {STANDIN_NIXOS} {{
            inherit lib; system = "x86_64-linux";
            modules = [ {module} {{ services.ollama.enable = true; services.ollama.package = stub;
              fileSystems."/".device = "/dev/sda1"; boot.loader.grub.device = "nodev"; }} ];
          }};
      in host.config.systemd.units."ollama.service".text
    """
    return verify_unit(nix_eval(expr), "ollama.service", tmp_path, exe_stub)
