"""The Nix side, as far as it can be checked without nixpkgs (Debian's Nix 2.8 here).

- every .nix file parses; builtins-only logic (pins, patch series, settings schema)
  is evaluated with `nix-instantiate --eval`;
- pins carry real hashes, flake.lock locks every input, and the Nix side and the
  Python side agree on the patch list and on the SGLang / torch / FlashInfer versions;
- with NIXPKGS_LIB set to a copy of nixpkgs' lib/ directory, the NixOS module is
  evaluated with lib.evalModules, its unit rendered and checked with systemd-analyze;
  with UV2NIX_SRC and PYPROJECT_NIX_SRC also set, uv2nix loads python/uv.lock.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest
import yaml
from conftest import REPO
from sglang_eagle3 import stacks
from sglang_eagle3.serving import settings
from sglang_eagle3.trees import patchset
from support import flake_eval, pins
from support.nix_harness import (
    NIX,
    NIXPKGS_LIB,
    PYPROJECT_NIX_SRC,
    UV2NIX_SRC,
    evaluate_module,
    evaluate_module_error,
    needs_lib,
    needs_nix,
    nix_eval,
    ollama_exposure,
    verify_unit,
)

SGLANG_VERSION = stacks.default().version  # the default stack's release
NIX_FILES = sorted(p for p in REPO.rglob("*.nix") if ".venv" not in p.parts and ".git" not in p.parts)
PINS = pins.pins()
LOCK = tomllib.loads((REPO / "python" / "uv.lock").read_text())


def locked(name: str) -> dict:
    return next(p for p in LOCK["package"] if p["name"] == name)


# -- parsing and builtins-only logic ------------------------------------------------------


@needs_nix
@pytest.mark.parametrize("path", NIX_FILES, ids=lambda p: str(p.relative_to(REPO)))
def test_nix_file_parses(path):
    result = subprocess.run([NIX, "--parse", str(path)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


@needs_nix
def test_nix_and_python_apply_the_same_patch_series_with_the_same_flags():
    series = nix_eval(
        f'let s = import ./nix/patch-series.nix "{SGLANG_VERSION}"; in {{ inherit (s) names flags version; }}'
    )
    python_series = patchset.PatchSeries.load()
    assert series["names"] == [p.name for p in python_series.patches]
    assert series["flags"] == patchset.PATCH_FLAGS
    assert series["version"] == python_series.sglang_version == SGLANG_VERSION


@needs_nix
def test_every_pin_evaluates_to_fetchurl_arguments_with_a_real_hash():
    names = [n for n in PINS if n not in ("_comment", "stack", "stacks")]
    args = nix_eval(f"map (import ./nix/pins.nix).fetchurlArgs {json.dumps(names).replace(',', ' ')}")
    for name, arg in zip(names, args, strict=True):
        assert re.fullmatch(r"[0-9a-f]{64}", arg["sha256"]), name
        assert len(set(arg["sha256"])) > 4, f"{name}: placeholder-looking hash"
        assert arg["url"].startswith("https://") and arg["name"] == PINS[name]["wheel"]
        assert "%" not in arg["name"], "store path names cannot contain %"


@needs_nix
def test_a_pin_without_a_verified_hash_stops_evaluation_and_says_how_to_fill_it(tmp_path):
    (tmp_path / "nix").mkdir()
    shutil.copy(REPO / "nix" / "pins.nix", tmp_path / "nix")
    pins = json.loads(json.dumps(PINS))
    pins["sgl-kernel"]["sha256"] = None
    (tmp_path / "nix" / "pins.json").write_text(json.dumps(pins))
    result = subprocess.run(
        [NIX, "--eval", "--strict", "-E", '(import ./nix/pins.nix).fetchurlArgs "sgl-kernel"'],
        capture_output=True, text=True, cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode != 0
    assert "'sgl-kernel'" in result.stderr and "has no verified sha256" in result.stderr
    assert "nix store prefetch-file --json --hash-type sha256" in result.stderr


@needs_nix
def test_settings_options_are_derived_from_the_launchers_schema():
    options = nix_eval("import ./nix/settings-options.nix { }")
    assert set(options) == set(settings.ServerSettings.model_fields)
    assert options["tp_size"] == {
        "kind": "int", "nullable": False, "min": 1, "max": None, "values": None, "default": 8,
        "description": settings.ServerSettings.model_fields["tp_size"].description, "flag": "--tp-size",
    }  # fmt: skip
    assert (options["port"]["min"], options["port"]["max"]) == (1, 65535)
    assert options["speculative_algorithm"]["kind"] == "enum" and options["speculative_algorithm"]["nullable"]
    assert options["extra_args"]["kind"] == "listOfStr" and options["environment"]["kind"] == "attrsOfStr"
    # every text the settings refuse empty (the schema's minLength) is nonEmptyStr, and only those
    schema = settings.json_schema()["properties"]
    never_empty = {
        name for name, prop in schema.items()
        if any(v.get("type") == "string" and v.get("minLength") == 1 for v in prop.get("anyOf", [prop]))
    }  # fmt: skip
    assert {"model_path", "host", "served_model_name", "revision"} <= never_empty
    assert {name for name, o in options.items() if o["kind"] == "nonEmptyStr"} == never_empty
    multi = {name: o["multiNodeDefault"] for name, o in options.items() if "multiNodeDefault" in o}
    assert multi == settings.multi_node_defaults() == {"enable_flashinfer_allreduce_fusion": False}


def test_committed_schema_is_the_generated_one():
    committed = json.loads((REPO / "modules" / "settings-schema.json").read_text())
    assert committed == settings.json_schema(), (
        "modules/settings-schema.json is stale: sglang-eagle3 settings schema > modules/settings-schema.json"
    )


# -- pins, lock files and versions agree ---------------------------------------------------


def test_versions_agree_across_nix_uv_lock_patches_and_launcher():
    base = lambda v: v.split("+")[0]  # noqa: E731
    assert PINS["sglang"]["version"] == locked("sglang")["version"] == SGLANG_VERSION
    assert (REPO / "patches" / f"sglang-{SGLANG_VERSION}" / "series").is_file()
    for name in ("torch", "torchvision", "sgl-kernel", "flashinfer-python", "flashinfer-cubin"):
        assert base(PINS[name]["version"]) == locked(name)["version"], name
    # SGLang's own pins (its wheel metadata) are what uv.lock resolved.
    assert any(d["name"] == "transformers" for d in locked("sglang")["dependencies"])
    assert locked("transformers")["version"] == "4.57.1" and locked("torch")["version"] == "2.9.1"
    assert PINS["stack"]["cudaPackages"] == "cudaPackages_" + PINS["stack"]["cuda"].replace(".", "_")


# -- the second stack: its lock and its pins agree ---------------------------------------------

STACKS = {v: s for v, s in PINS["stacks"].items() if not v.startswith("_")}
NEWEST_LOCK = tomllib.loads((REPO / STACKS["0.5.23"]["workspace"] / "uv.lock").read_text())


@needs_nix
def test_every_stack_names_its_pins_lock_series_and_data():
    stacks = nix_eval("builtins.mapAttrs (v: _: (import ./nix/pins.nix).stackOf v) (import ./nix/pins.nix).stacks")
    assert set(stacks) == set(STACKS) and PINS["stack"]["default"] in stacks
    for version, stack in stacks.items():
        assert stack["sglangPin"] == PINS[stack["sglang"]] and stack["sglangPin"]["version"] == version
        assert (REPO / stack["workspace"] / "uv.lock").is_file() and (
            REPO / stack["workspace"] / "pyproject.toml"
        ).is_file()
        assert (REPO / "patches" / f"sglang-{version}" / "series").is_file()
        # Every stack's data alike, in nix/stacks/sglang-<version>/ (the default stack's too).
        assert stack["data"] == f"nix/stacks/sglang-{version}", version
        for data in (
            "wheel-closure.json",
            "wheel-libraries.json",
            "flashinfer-call-policy.json",
            "flashinfer-calls.json",
            "runtime-lookup-policy.json",
            "runtime-lookups.json",
            "sglang-rule-policy.json",
            "sglang-rules.json",
            "startup-gate-policy.json",
            "startup-gates.json",
        ):
            assert (REPO / stack["data"] / data).is_file(), (version, data)
    missing = subprocess.run(
        [NIX, "--eval", "-E", '(import ./nix/pins.nix).stackOf "0.6"'], capture_output=True, text=True
    )
    assert missing.returncode != 0 and "nix/pins.json has no stack '0.6'; the pinned stacks are:" in missing.stderr


@pytest.mark.parametrize("pin", ["sglang-0.5.23", "torch-2.14.1", "flashinfer-python-0.7.2", "sglang-kernel-0.4.10"])
def test_the_0_5_23_pins_are_its_uv_lock_versions_and_hashes(pin):
    name = re.sub(r"-[\d.]+$", "", pin)
    (package,) = [p for p in NEWEST_LOCK["package"] if p["name"] == name]
    wheels = {Path(w["url"]).name: w for w in package["wheels"]}
    assert PINS[pin]["version"] == package["version"]
    assert wheels[PINS[pin]["wheel"]]["hash"] == "sha256:" + PINS[pin]["sha256"]
    assert wheels[PINS[pin]["wheel"]]["url"] == PINS[pin]["url"]


def test_the_0_5_23_lock_is_for_cpython_3_12_on_x86_64_linux_and_pins_what_sglang_pins(newest_tree):
    markers = NEWEST_LOCK["supported-markers"]
    assert markers == [
        "python_full_version == '3.12.*' and implementation_name == 'cpython' "
        "and platform_machine == 'x86_64' and sys_platform == 'linux'"
    ]
    assert f"{PINS['stack']['python']}.*" in markers[0]
    # Every == pin of SGLang 0.5.23's own METADATA (the real wheel) is what the lock resolved.
    metadata = next(newest_tree.glob("sglang-0.5.23.dist-info")) / "METADATA"
    requires = [line.split(":", 1)[1].strip() for line in metadata.read_text().splitlines()
                if line.startswith("Requires-Dist:") and "extra ==" not in line]  # fmt: skip
    locked = {p["name"]: p["version"] for p in NEWEST_LOCK["package"]}
    normalise = lambda n: re.sub(r"[-_.]+", "-", n).lower()  # noqa: E731
    pinned = {}
    for requirement in requires:
        match = re.match(r"([A-Za-z0-9_.-]+)(\[[^]]*\])?==([\w.]+)(;.*)?$", requirement)
        if match and not (match.group(4) and "aarch64" in match.group(4) and "x86_64" not in match.group(4)):
            pinned[normalise(match.group(1))] = match.group(3)
    assert {"torch", "transformers", "flashinfer-python", "sglang-kernel", "tokenizers"} <= set(pinned)
    assert {n: locked.get(n) for n in pinned} == pinned
    assert locked["torch"] == "2.14.1" and locked["sglang"] == "0.5.23"


@pytest.mark.parametrize("name", ["sglang", "flashinfer-python", "flashinfer-cubin"])
def test_pypi_pins_are_the_uv_lock_hashes(name):
    wheels = {Path(w["url"]).name: w["hash"] for w in locked(name)["wheels"]}
    assert wheels[PINS[name]["wheel"]] == "sha256:" + PINS[name]["sha256"]


def test_the_test_environment_is_pinned_by_uv_lock_alone():
    """One lock for one environment: tests/run takes every version from uv.lock."""
    names = {p["name"] for p in LOCK["package"]}
    normalise = lambda n: re.sub(r"[-_.]+", "-", n).lower()  # noqa: E731
    wanted = [line.strip() for line in (REPO / "tests" / "requirements.txt").read_text().splitlines()
              if line.strip() and not line.startswith("#")]  # fmt: skip
    assert wanted and all(re.fullmatch(r"[A-Za-z0-9_.-]+", w) for w in wanted), "names only, no versions"
    assert [w for w in wanted if normalise(w) not in names] == [], "every test requirement is in python/uv.lock"
    assert not (REPO / "tests" / "constraints.txt").exists()
    run = (REPO / "tests" / "run").read_text()
    assert "uv export" in run and "--frozen" in run and "-c .venv/lock-constraints.txt" in run


def test_flake_lock_locks_every_input_with_real_hashes():
    lock = json.loads((REPO / "flake.lock").read_text())
    assert lock["version"] == 7
    nodes = lock["nodes"]
    root_inputs = nodes[lock["root"]]["inputs"]
    assert set(root_inputs) == {"nixpkgs", "pyproject-nix", "uv2nix", "pyproject-build-systems"}
    for name in root_inputs.values():
        locked_ = nodes[name]["locked"]
        assert locked_["type"] == "github"
        assert re.fullmatch(r"[0-9a-f]{40}", locked_["rev"]), name
        assert re.fullmatch(r"sha256-[A-Za-z0-9+/]{43}=", locked_["narHash"]), name
        assert not locked_["narHash"].startswith("sha256-AAAAAAAA"), name
        assert isinstance(locked_["lastModified"], int) and locked_["lastModified"] > 1.7e9
    # follows: one nixpkgs and one pyproject-nix for everybody
    for name in ("pyproject-nix", "uv2nix", "pyproject-build-systems"):
        assert nodes[name]["inputs"]["nixpkgs"] == ["nixpkgs"]
    assert nodes["uv2nix"]["inputs"]["pyproject-nix"] == ["pyproject-nix"]
    assert nodes["pyproject-build-systems"]["inputs"]["uv2nix"] == ["uv2nix"]


@needs_nix
def test_flake_inputs_match_the_lock():
    inputs = nix_eval("builtins.mapAttrs (_: i: i.url) (import ./flake.nix).inputs")
    lock = json.loads((REPO / "flake.lock").read_text())["nodes"]
    for name, url in inputs.items():
        original = lock[name]["original"]
        expected = f"github:{original['owner']}/{original['repo']}" + (
            f"/{original['ref']}" if "ref" in original else ""
        )
        assert url == expected, name


def test_no_placeholder_hashes_anywhere():
    pattern = re.compile(r"fakeHash|fakeSha256|lib\.fake|0{32}|sha256-A{43}=")
    for path in [*NIX_FILES, REPO / "flake.lock", REPO / "nix" / "pins.json"]:
        assert not pattern.search(path.read_text()), f"placeholder hash in {path.relative_to(REPO)}"


# -- the NixOS module, with nixpkgs' lib only ------------------------------------------------


@needs_lib
@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="needs systemd-analyze (Debian: systemd)")
def test_module_8_gpu_host(tmp_path, exe_stub):
    out = evaluate_module(str(REPO / "modules" / "examples" / "8-gpu-host.nix"))
    assert out["failedAssertions"] == []
    service = out["services"]["sglang-eagle3"]
    sc = service["serviceConfig"]
    assert sc["Type"] == "notify" and sc["NotifyAccess"] == "main"
    assert sc["LoadCredential"] == ["api-key:/run/secrets/sglang-api-key"]
    assert sc["PrivateDevices"] is False and "MemoryDenyWriteExecute" not in sc
    assert sc["ProtectSystem"] == "strict" and sc["UMask"] == "0077" and sc["LimitMEMLOCK"] == "infinity"
    assert sc["Restart"] == "on-failure" and sc["TimeoutStartSec"] >= 7200
    assert service["environment"]["CUDA_VISIBLE_DEVICES"] == "0,1,2,3,4,5,6,7"
    exe, *args = sc["ExecStart"].split(" ")
    assert exe.endswith("/bin/sglang-eagle3") and args[:2] == ["serve", "--config"]
    assert args[2].endswith("-sglang-eagle3-settings.json")
    rendered = out["settings"]
    # The settings file is valid for the launcher: its own loader accepts it.
    settings_file = tmp_path / "settings.json"
    settings_file.write_text(json.dumps(rendered))
    loaded = settings.load(settings_file, environ={})
    assert loaded.model_path == "/var/lib/models/Kimi-K2.5-NVFP4" and loaded.tp_size == 8
    assert loaded.speculative_algorithm == "EAGLE3" and loaded.ready_timeout == 7200
    assert "api" not in json.dumps(rendered).lower().replace("api_key_file", "")
    assert out["allowedTCPPorts"] == [30000]
    bench = out["services"]["sglang-eagle3-bench"]
    assert bench["after"] == ["sglang-eagle3.service"] and bench["serviceConfig"]["Type"] == "oneshot"
    patterns = out["requiredMounts"]["allowedPatterns"]["sglang-eagle3-models"]
    assert patterns["onFeatures"] == ["cuda"] and out["requiredMounts"]["presets"]["nvidia-gpu"]["enable"]

    unit_text = out["units"]["sglang-eagle3.service"]
    assert "Type=notify\n" in unit_text and "LoadCredential=api-key:/run/secrets/sglang-api-key\n" in unit_text
    exposure = verify_unit(unit_text, "sglang-eagle3.service", tmp_path, exe_stub)
    print(f"sglang-eagle3.service exposure: {exposure}")
    verify_unit(out["units"]["sglang-eagle3-bench.service"], "sglang-eagle3-bench.service", tmp_path, exe_stub)
    ollama = os.environ.get("OLLAMA_MODULE")
    if ollama:  # nixpkgs' nixos/modules/services/misc/ollama.nix, rendered the same way
        reference = ollama_exposure(Path(ollama), tmp_path, exe_stub)
        print(f"nixpkgs ollama.service exposure: {reference}")
        assert exposure <= reference


@needs_lib
def test_module_two_node_rank_0(tmp_path):
    out = evaluate_module(str(REPO / "modules" / "examples" / "two-node.nix"))
    assert out["failedAssertions"] == []
    assert out["allowedTCPPorts"] == [50000]
    settings_file = tmp_path / "settings.json"
    settings_file.write_text(json.dumps(out["settings"]))
    loaded = settings.load(settings_file, environ={})
    assert (loaded.nnodes, loaded.node_rank, loaded.dist_init_addr, loaded.tp_size) == (2, 0, "10.0.0.1:50000", 16)
    assert loaded.enable_flashinfer_allreduce_fusion is False  # one node only: the module's multi-node default


@needs_lib
def test_module_turns_the_fusion_off_across_hosts_unless_settings_say_otherwise():
    """FlashInfer's all-reduce fusion works within one node only: with nnodes > 1 the module defaults it to false
    (the schema's multiNodeDefault, settings.multi_node_defaults()); one host keeps the tuned default, and a value
    given in `settings` still wins (preflight then refuses it across hosts)."""
    fusion = "enable_flashinfer_allreduce_fusion"
    two = REPO / "modules" / "examples" / "two-node.nix"
    assert settings.multi_node_defaults() == {fusion: False}
    assert evaluate_module(str(two))["settings"][fusion] is False
    assert evaluate_module("{ services.sglang-eagle3.enable = true; }")["settings"][fusion] is True
    given = f"{{ imports = [ {two} ]; services.sglang-eagle3.settings.{fusion} = true; }}"
    out = evaluate_module(given)
    assert out["failedAssertions"] == [] and out["settings"][fusion] is True


@needs_lib
@pytest.mark.parametrize(
    "override, message",
    [
        ("{ services.sglang-eagle3.distInitAddr = lib.mkForce null; }", "nnodes = 2 needs distInitAddr"),
        ("{ services.sglang-eagle3.nodeRank = lib.mkForce 2; }", "nodeRank 2 must be below nnodes (2)"),
        ("{ services.sglang-eagle3.gpus = lib.mkForce [ 0 1 2 3 ]; }", "needs 8 GPUs per host, but gpus lists 4"),
        ("{ services.sglang-eagle3.settings.tp_size = lib.mkForce 15; }", "must split evenly over nnodes (2)"),
        ('{ services.sglang-eagle3.distInitAddr = lib.mkForce "10.0.0.1:30000"; }', "must differ from settings.port"),
    ],
)
def test_module_assertions_fire(override, message):
    config = f"{{ lib, ... }}: {{ imports = [ {REPO / 'modules' / 'examples' / 'two-node.nix'} ]; }} // ({override})"
    out = evaluate_module(f"({config})")
    assert any(message in m for m in out["failedAssertions"]), out["failedAssertions"]


@needs_lib
@pytest.mark.parametrize("setting", ["model_path", "host", "served_model_name"])
@pytest.mark.parametrize(
    "value, launcher_says", [("", "String should have at least 1 character"), (" \t", "is only white space")]
)
def test_module_rejects_an_empty_text_setting_as_the_launcher_does(setting, value, launcher_says):
    nix_value = value.replace("\t", "\\t")
    error = evaluate_module_error(
        f'{{ services.sglang-eagle3 = {{ enable = true; settings.{setting} = "{nix_value}"; }}; }}'
    )
    assert setting in error and "is not of type" in error and "non-empty string" in error
    with pytest.raises(settings.SettingsError, match=f"{setting}: {launcher_says}"):
        settings.load(assignments=[f"{setting}={value}"], environ={})


@needs_lib
def test_module_rejects_an_api_key_given_as_a_store_path():
    error = evaluate_module_error('{ services.sglang-eagle3 = { enable = true; apiKeyFile = "relative/key"; }; }')
    assert "apiKeyFile" in error


@pytest.mark.skipif(
    not (NIX and NIXPKGS_LIB and UV2NIX_SRC and PYPROJECT_NIX_SRC),
    reason=f"needs the staged uv2nix and pyproject.nix trees: {flake_eval.HOW_TO_STAGE}",
)
def test_uv2nix_loads_the_workspace():
    expr = f"""
      let lib = import {NIXPKGS_LIB};
          pyproject-nix = import {PYPROJECT_NIX_SRC} {{ inherit lib; }};
          uv2nix = import {UV2NIX_SRC}/lib {{ inherit pyproject-nix lib; }};
          ws = uv2nix.workspace.loadWorkspace {{ workspaceRoot = {REPO / "python"}; }};
          overlay = ws.mkPyprojectOverlay {{ sourcePreference = "wheel"; }};
      in {{ all = ws.deps.all; overlay = builtins.isFunction overlay; }}
    """
    out = nix_eval(expr)
    assert out == {"all": {"sglang-eagle3": ["router", "server", "test"]}, "overlay": True}


# -- the GitHub workflow -----------------------------------------------------------------------


def nix_build_links(script: str) -> list[tuple[str, str]]:
    """(installable, out link) for each `nix build` in a step's shell script: `--out-link X`
    / `-o X` links X, `--no-link` nothing, otherwise ./result (the first output's link)."""
    builds = []
    for command in re.split(r"&&|\|\||;|\n", script.replace("\\\n", " ")):
        words = shlex.split(command)  # not comments=True: shlex then cuts `.#attr` at the `#`
        words = words[: next((i for i, w in enumerate(words) if w.startswith("#")), len(words))]
        if words[:2] != ["nix", "build"]:
            continue
        installables = [w for w in words[2:] if w.startswith((".", "/", "github:", "path:")) and "#" in w or w == "."]
        link = "result"
        for i, word in enumerate(words):
            if word == "--no-link":
                link = None
            elif word in ("--out-link", "-o"):
                link = words[i + 1]
            elif word.startswith("--out-link="):
                link = word.split("=", 1)[1]
        if link is not None:
            builds.extend((installable, link) for installable in installables)
    return builds


def test_the_workflows_smoke_test_runs_the_package_the_build_step_linked():
    """.github/workflows/nix.yml: each ./<link> the smoke test runs was last linked by the
    packages.default build; no step between them (the VM test's build) relinks it."""
    steps = yaml.safe_load((REPO / ".github/workflows/nix.yml").read_text())["jobs"]["flake"]["steps"]
    (smoke,) = [i for i, step in enumerate(steps) if step.get("name", "").startswith("Smoke test")]
    used = set(re.findall(r"\./(result[\w.-]*)/", steps[smoke]["run"]))
    assert used, steps[smoke]["run"]
    for link in used:
        builds = [build for step in steps[:smoke] for build in nix_build_links(step.get("run", ""))]
        linked_by = [installable for installable, out in builds if out == link]
        assert linked_by, f"no step before the smoke test links ./{link}"
        assert linked_by[-1] == ".#packages.x86_64-linux.default", f"./{link} is last linked by {linked_by[-1]}"
    # The parser sees what Nix does: a plain `nix build` links ./result, --no-link nothing.
    assert nix_build_links("nix build .#a --print-build-logs\nnix build .#b --no-link") == [(".#a", "result")]
    assert nix_build_links("nix build -o out .#c && true # nix build .#d") == [(".#c", "out")]


# Each launcher field that has its own option, the option, and a value for it in `settings`.
OWNED_FIELDS = {
    "api_key_file": ("apiKeyFile", '"/run/secrets/key"'),
    "admin_api_key_file": ("adminApiKeyFile", '"/run/secrets/admin-key"'),
    "ssl_keyfile_password_file": ("sslKeyfilePasswordFile", '"/run/secrets/tls-key-password"'),
    "environment": ("environment", '{ NCCL_DEBUG = "INFO"; }'),
    "extra_args": ("extraArgs", '[ "--log-level" "info" ]'),
    "nnodes": ("nnodes", "4"),
    "node_rank": ("nodeRank", "1"),
    "dist_init_addr": ("distInitAddr", '"10.0.0.1:50000"'),
}


@needs_lib
def test_module_rejects_a_setting_that_has_its_own_option():
    """`settings.nnodes = 4` would lose to the `nnodes` option silently: each such field is refused, naming it."""
    given = " ".join(f"{field} = {value};" for field, (_, value) in OWNED_FIELDS.items())
    out = evaluate_module(f"{{ services.sglang-eagle3 = {{ enable = true; settings = {{ {given} }}; }}; }}")
    for field, (option, _) in OWNED_FIELDS.items():
        wanted = f"services.sglang-eagle3.settings.{field}: set services.sglang-eagle3.{option} instead"
        assert any(m.startswith(wanted) for m in out["failedAssertions"]), (field, out["failedAssertions"])
    assert len(out["failedAssertions"]) == len(OWNED_FIELDS), out["failedAssertions"]


@needs_lib
def test_module_environment_reaches_what_preflight_judges(tmp_path, pristine_tree):
    """`environment` has one path: the settings file, which preflight judges and the launcher passes to SGLang; the
    unit's own Environment= does not carry it (a variable there would reach SGLang but never preflight's rules)."""
    from sglang_eagle3.judging import preflight, settings_rules
    from sglang_eagle3.serving import launch_plan
    from sglang_eagle3.source.tree import locate

    out = evaluate_module(
        "{ services.sglang-eagle3 = { enable = true; gpus = [ 0 1 2 3 4 5 6 7 ]; environment = "
        '{ NCCL_DEBUG = "WARN"; SGLANG_NO_SUCH_SWITCH = "1"; }; }; }'
    )
    assert out["failedAssertions"] == []
    given = {"NCCL_DEBUG": "WARN", "SGLANG_NO_SUCH_SWITCH": "1"}
    assert out["settings"]["environment"] == given
    unit = out["services"]["sglang-eagle3"]["environment"]
    assert not set(given) & set(unit) and unit["CUDA_VISIBLE_DEVICES"] == "0,1,2,3,4,5,6,7"
    settings_file = tmp_path / "settings.json"
    settings_file.write_text(json.dumps(out["settings"]))
    loaded = settings.load(settings_file, environ={})
    plan = launch_plan.build(loaded, python="python", environ={})
    assert plan.env.items() >= given.items()  # reaches SGLang
    report = preflight.Preflight()
    settings_rules.check_settings_version(report, loaded, plan.args, locate(pristine_tree))
    (found,) = report.findings  # and preflight's rules judge it: 0.5.9 reads no such variable
    assert found.status is preflight.Status.FAIL and "does not read SGLANG_NO_SUCH_SWITCH" in found.message


@needs_lib
def test_module_and_launcher_share_one_ready_timeout_default():
    out = evaluate_module("{ services.sglang-eagle3.enable = true; }")
    default = settings.ServerSettings().ready_timeout
    assert out["failedAssertions"] == []
    assert out["settings"]["ready_timeout"] == default
    assert out["services"]["sglang-eagle3"]["serviceConfig"]["TimeoutStartSec"] == default + 120
    # Cold first start: a 600 GB checkpoint load, FlashInfer's JIT compilation and CUDA graph capture.
    assert default == 7200


@needs_lib
def test_both_timeouts_are_settings_and_systemd_follows_them():
    """settings.ready_timeout and settings.stop_timeout, one scheme: each a setting the launcher reads, and
    systemd's start and stop timeouts that setting plus the grace of modules/server-process.json."""
    out = evaluate_module("{ services.sglang-eagle3 = { enable = true; settings.ready_timeout = 900.5; "
                          "settings.stop_timeout = 45; }; }")  # fmt: skip
    assert out["failedAssertions"] == [] and out["warnings"] == []
    assert (out["settings"]["ready_timeout"], out["settings"]["stop_timeout"]) == (900.5, 45)
    unit = out["services"]["sglang-eagle3"]["serviceConfig"]
    assert (unit["TimeoutStartSec"], unit["TimeoutStopSec"]) == (901 + 120, 45 + 30)


@needs_lib
def test_the_former_start_timeout_option_still_sets_ready_timeout_with_a_warning():
    """A host written for the startTimeoutSec option keeps working (lib.mkRenamedOptionModule): its value is
    settings.ready_timeout now, and evaluation warns with the new name."""
    out = evaluate_module("{ services.sglang-eagle3 = { enable = true; startTimeoutSec = 5400; }; }")
    assert out["failedAssertions"] == [] and out["settings"]["ready_timeout"] == 5400
    assert out["services"]["sglang-eagle3"]["serviceConfig"]["TimeoutStartSec"] == 5400 + 120
    assert [w for w in out["warnings"] if "startTimeoutSec" in w and "settings.ready_timeout" in w], out["warnings"]
