"""Every output of the flake, evaluated with the real locked inputs and the nixpkgs stand-in.

See tests/flake_eval.py for how: uv2nix, pyproject.nix and build-system-pkgs are the
exact locked trees (Nix checks their narHash against flake.lock); nixpkgs is
tests/nix/nixpkgs with nixpkgs' real lib. The derivations that the stand-in can build with
this machine's programs (the patched SGLang wheel, the formatting check) are built.
"""

from __future__ import annotations

import ast
import json
import re
import shutil
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest
from sglang_eagle3.trees import patchset
from support import pins
from support.flake_eval import REPO, Workspace, needs_flake_eval

SYSTEM = "x86_64-linux"
pytestmark = needs_flake_eval()


@pytest.fixture(scope="module")
def ws(tmp_path_factory) -> Workspace:
    return Workspace(tmp_path_factory.mktemp("flake"))


def test_locked_inputs_are_the_exact_trees_of_flake_lock(ws):
    for node, tree in ws.inputs.items():
        assert ws.nar_hash(tree) == ws.original_lock["nodes"][node]["locked"]["narHash"], node


def test_flake_check_evaluates_every_output_with_no_warning(ws):
    result = ws.nix("flake", "check", "--no-build", ws.ref)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert not [line for line in lines if "warning" in line.lower()], result.stderr
    checked = set(re.findall(r"checking derivation (\S+)\.\.\.", result.stderr))
    for output in (
        "packages.x86_64-linux.default", "packages.x86_64-linux.sglang-wheel", "packages.x86_64-linux.cuda-toolkit",
        "packages.x86_64-linux.gpu-throughput-check", "devShells.x86_64-linux.default",
        "checks.x86_64-linux.pytest", "checks.x86_64-linux.formatting", "checks.x86_64-linux.patch-series",
        "checks.x86_64-linux.module-8-gpu-host", "checks.x86_64-linux.module-two-node",
        "checks.x86_64-linux.module-assertions", "checks.x86_64-linux.module-monitoring",
        "checks.x86_64-linux.module-models", "checks.x86_64-linux.module-cluster", "formatter.x86_64-linux",
        "packages.x86_64-linux.sglang-router", "packages.x86_64-linux.router-vm-test",
        # the second pinned stack (tests/test_flake.py, "the SGLang 0.5.23 stack")
        "packages.x86_64-linux.sglang-eagle3-0_5_23", "packages.x86_64-linux.sglang-wheel-0_5_23",
        "checks.x86_64-linux.module-package-0_5_23", "checks.x86_64-linux.patch-series-0_5_23",
    ):  # fmt: skip
        assert output in checked, f"nix flake check did not evaluate {output}"
    for app in ("default", "serve-eagle3", "bench", "probe", "serve-eagle3-0_5_23", "upgrade-ab"):
        assert f"checking app 'apps.{SYSTEM}.{app}'" in result.stderr


def test_apps_start_the_launchers_subcommands(ws):
    for app, command in (("serve-eagle3", "serve"), ("bench", "bench"), ("probe", "probe")):
        program = ws.eval(f"apps.{SYSTEM}.{app}.program")
        assert re.fullmatch(rf"/nix/store/[a-z0-9]{{32}}-{app}", program), program
        assert ws.eval(f"apps.{SYSTEM}.{app}.meta.description") == f"sglang-eagle3 {command}"
    assert ws.eval(f"apps.{SYSTEM}.default.program") == ws.eval(f"apps.{SYSTEM}.serve-eagle3.program")


def test_the_patched_wheel_derivation_calls_the_tested_script(ws):
    drv = json.loads(ws.nix("derivation", "show", f"{ws.ref}#packages.{SYSTEM}.sglang-wheel").stdout)
    (info,) = drv.values()
    command = info["env"]["buildCommand"]
    assert re.search(r"bash /nix/store/[a-z0-9]{32}-patch-wheel\.sh ", command), command
    assert "sglang-0.5.9-py3-none-any.whl $out" in command
    names = re.findall(r"/(\d{4}-[\w.-]+\.patch)", command)
    series = ws.eval_expr('(import "${flake}/nix/patch-series.nix" "0.5.9").names')
    assert names == series
    assert info["env"]["PATCH_FLAGS"] == " ".join(
        ws.eval_expr('(import "${flake}/nix/patch-series.nix" "0.5.9").flags')
    )


def test_the_patched_wheel_builds_with_the_pinned_wheel(ws, pristine_wheel, patched_tree, tmp_path):
    """The derivation itself, run here: the pinned wheel is put in the store under the
    name and hash fetchurl would give it; the stand-in's patch and python are this host's."""
    if shutil.which("patch") is None:
        pytest.skip("needs GNU patch")
    pin = pins.pins()["sglang"]
    named = tmp_path / pin["wheel"]
    shutil.copy(pristine_wheel, named)
    added = ws.nix("store", "add-file", str(named)).stdout.strip()
    fod = ws.eval(f"packages.{SYSTEM}.sglang-wheel.pristine.outPath")
    assert added == fod, "the pinned wheel's store path is the one fetchurl would produce"
    out = ws.nix("build", "--no-link", "--print-out-paths", "--option", "sandbox", "false",
                 f"{ws.ref}#packages.{SYSTEM}.sglang-wheel").stdout.strip()  # fmt: skip
    wheel = next(Path(out).glob("*.whl"))
    assert wheel.name == pin["wheel"]
    with zipfile.ZipFile(wheel) as archive:
        patched = archive.read("sglang/srt/models/kimi_k25.py")
    assert patched == (patched_tree / "sglang/srt/models/kimi_k25.py").read_bytes()


def test_formatting_check_runs_the_script_with_the_locked_ruff(ws):
    """The check's build is scripts/check-formatting.sh (run by tests/test_build_scripts.py with
    the test environment's ruff); here: the derivation calls it, with ruff at uv.lock's version."""
    check = f"checks.{SYSTEM}.formatting"
    assert re.search(r"bash /nix/store/[a-z0-9]{32}-check-formatting\.sh /nix/store/", ws.eval(f"{check}.buildCommand"))
    inputs = ws.eval(f"{check}.nativeBuildInputs", apply="map (d: d.name)")
    assert "sglang-eagle3-lint-env" in inputs
    lint = ws.eval(f"packages.{SYSTEM}.default.passthru.lintEnv.NIX_PYPROJECT_DEPS")
    ruff = next(p for p in tomllib.loads((REPO / "python" / "uv.lock").read_text())["package"] if p["name"] == "ruff")
    assert any(dep.endswith(f"-ruff-{ruff['version']}") for dep in lint.split(":")), lint


def test_monitoring_check_builds_with_promtool(ws):
    if shutil.which("promtool") is None:
        pytest.skip("needs promtool (Debian: prometheus)")
    ws.nix("build", "--no-link", "--option", "sandbox", "false", f"{ws.ref}#checks.{SYSTEM}.module-monitoring")


def test_fetch_model_builds_a_model_directory_from_a_lock(ws, tmp_path):
    """lib.fetchModel built for real: one fixed-output fetch per file from the stand-in hub
    (the stand-in's fetchurl downloads with this host's curl), joined by linkFarm."""
    if shutil.which("curl") is None:
        pytest.skip("needs curl")
    from stand_ins.fake_hub import FakeHub
    from support.models_fixtures import REPO_ID, models_env, run_models, sample_files

    with FakeHub() as hub:
        hub.commit(REPO_ID, sample_files())
        lock = tmp_path / "tiny.lock.json"
        code, _, _, err = run_models(models_env(hub, tmp_path), "lock", REPO_ID, "--output", str(lock))
        assert code == 0, err
        expr = (f'let flake = builtins.getFlake "{ws.ref}"; in '
                f'flake.lib.fetchModel {{ lockFile = {lock}; endpoint = "{hub.url}"; }}')  # fmt: skip
        out = ws.nix("build", "--impure", "--no-link", "--print-out-paths", "--option", "sandbox", "false",
                     "--expr", expr).stdout.strip()  # fmt: skip
    model = Path(out)
    built = {str(p.relative_to(model)): p.read_bytes() for p in model.rglob("*") if p.is_file()}
    assert built == sample_files()


def test_router_vm_test_evaluates_and_needs_kvm(ws):
    test = f"packages.{SYSTEM}.router-vm-test"
    assert ws.eval(f"{test}.name") == "vm-test-run-sglang-router"
    assert set(ws.eval(f"{test}.requiredSystemFeatures")) == {"nixos-test", "kvm"}
    assert sorted(ws.eval(f"{test}.passthru.nodes", apply="builtins.attrNames")) == ["router", "worker1", "worker2"]
    script = ws.eval(f"{test}.testScript")
    assert "worker1.succeed" in script or "worker1" in script
    # Every node is a complete NixOS system: its assertions hold (forced through the toplevels).
    assert ws.eval(f"{test}.drvPath").endswith(".drv")
    router = ws.eval(f"{test}.passthru.nodes.router.config.systemd.services.sglang-router.serviceConfig.LoadCredential")
    assert router == ["api-key:/run/secrets/sglang-api-key"]


def third_party_imports(tree: Path) -> set[str]:
    """The top-level modules the Python files under `tree` import, less the standard
    library and the packages `tree` itself provides (it is the unit's PYTHONPATH)."""
    own = {p.name for p in tree.iterdir() if p.is_dir()} | {p.stem for p in tree.glob("*.py")}
    names: set[str] = set()
    for path in tree.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names.add(node.module.split(".")[0])
    return names - set(sys.stdlib_module_names) - own


def test_router_vm_workers_python_provides_every_module_the_stand_in_imports(ws):
    """The workers run the stand-in server with an interpreter whose environment provides
    each third-party module it imports (nixpkgs' own `pythonImportsCheck` of each package)."""
    units = ws.eval_expr(f"""
      builtins.mapAttrs (_: node: let
          unit = node.config.systemd.services.sglang-stand-in;
          python = node.config.system.build.sglangStandInPython;
        in {{
          inherit (unit) script;
          pythonPath = unit.environment.PYTHONPATH;
          interpreter = python.interpreter;
          provides = builtins.concatMap (p: p.pythonImportsCheck or [ ]) python.paths;
        }}) (removeAttrs flake.packages.{SYSTEM}.router-vm-test.passthru.nodes [ "router" ])
    """)  # fmt: skip
    assert sorted(units) == ["worker1", "worker2"]
    for name, unit in units.items():
        # The tree the unit puts on PYTHONPATH, as the store holds it (copied there by the eval).
        tree = Path(unit["pythonPath"])
        assert tree.name.endswith("-fake_sglang") and (tree / "sglang" / "launch_server.py").is_file(), unit
        imports = third_party_imports(tree)
        assert "prometheus_client" in imports, "the stand-in's metrics are prometheus_client's"
        assert f"exec {unit['interpreter']} -m sglang.launch_server" in unit["script"], unit["script"]
        assert imports <= set(unit["provides"]), f"{name}: {sorted(imports - set(unit['provides']))} not provided"


# What a module check must not build: a whole NixOS system (its toplevel) with its kernel and
# the NVIDIA driver's kernel module, none of which the public binary cache has for this host.
SYSTEM_BUILDS = re.compile(r"^(nixos-system-|linux-\d|nvidia-x11-|nvidia-open-)")


def test_module_checks_build_no_nixos_system_or_kernel(ws):
    checks = [name for name in ws.eval(f"checks.{SYSTEM}", apply="builtins.attrNames") if name.startswith("module-")]
    assert {"module-8-gpu-host", "module-two-node", "module-models", "module-cluster"} <= set(checks)
    for check in checks:
        closure = json.loads(ws.nix("derivation", "show", "--recursive", f"{ws.ref}#checks.{SYSTEM}.{check}").stdout)
        names = sorted({drv["name"] for drv in closure.values()})
        assert not [n for n in names if SYSTEM_BUILDS.match(n)], f"{check} builds {names}"
    # The pattern does match what a host's system build is made of.
    host = ws.eval_expr(
        'let h = inputs.nixpkgs.lib.nixosSystem { system = "x86_64-linux"; modules = [ flake.nixosModules.default '
        '"${flake}/modules/examples/8-gpu-host.nix" { fileSystems."/".device = "/dev/sda1"; '
        'boot.loader.grub.device = "nodev"; system.stateVersion = "25.11"; } ]; }; '
        "in [ h.config.system.build.toplevel.name h.config.boot.kernelPackages.kernel.name ]"
    )
    assert all(SYSTEM_BUILDS.match(name) for name in host), host


def test_module_checks_force_the_hosts_assertions_and_show_their_warnings(ws):
    """What building the toplevel did and the checks now do themselves (lib.asserts.checkAssertWarn,
    as nixos/modules/system/activation/top-level.nix): a host's warning is shown when the
    check is evaluated, and a failed assertion stops it with its message."""
    expr = """
      let checks = import "${{flake}}/nix/module-checks.nix" {{
            pkgs = inputs.nixpkgs.legacyPackages.x86_64-linux;
            inherit (inputs.nixpkgs) lib;
            nixpkgs = inputs.nixpkgs;
            module = {{ imports = [ flake.nixosModules.default ]; {extra} }};
            package = flake.packages.x86_64-linux.sglang-router;
            routerPackage = flake.packages.x86_64-linux.sglang-router;
          }};
      in checks.{check}.drvPath
    """
    full = 'let flake = builtins.getFlake "{ref}"; inputs = flake.inputs; in {expr}'
    for check in ("module-8-gpu-host", "module-two-node", "module-models", "module-monitoring", "module-cluster"):
        warned = ws.nix("eval", "--impure", "--raw", "--expr", full.format(
            ref=ws.ref, expr=expr.format(check=check, extra='warnings = [ "probe: a host warning" ];')))  # fmt: skip
        assert "evaluation warning: probe: a host warning" in warned.stderr, (check, warned.stderr)
    failed = ws.nix("eval", "--impure", "--raw", "--expr", full.format(ref=ws.ref, expr=expr.format(
        check="module-8-gpu-host", extra='assertions = [ { assertion = false; message = "probe: a host assertion"; } ];'
    )), check=False)  # fmt: skip
    assert failed.returncode != 0 and "probe: a host assertion" in failed.stderr, failed.stderr


# -- the findings of the review, each as a test --------------------------------------------


def test_test_environment_has_no_cuda_kernel_package(ws):
    deps = ws.eval(f"packages.{SYSTEM}.default.passthru.testEnv.NIX_PYPROJECT_DEPS")
    names = {re.sub(r"^[a-z0-9]{32}-", "", p.rsplit("/", 1)[1]) for p in deps.split(":")}
    assert not [n for n in names if n.startswith("sgl-kernel")], names
    assert any(n.startswith("sglang-0.5.9") for n in names) and any(n.startswith("torch-") for n in names)
    server = ws.eval(f"packages.{SYSTEM}.default.passthru.serverEnv.NIX_PYPROJECT_DEPS")
    assert any(re.search(r"-sgl-kernel-0\.3\.21\+cu130$", p) for p in server.split(":")), "the server has it"


def test_cuda_capabilities_unchosen_leave_the_targets_to_the_gpus_present(ws):
    """Unchosen (nixpkgs' default, what the CUDA cache builds), torch gets no target list and
    compiles for the GPUs it sees; chosen through the overlay or lib.mkStack, it gets the list.
    FlashInfer's list is never set: SGLang 0.5.9 sets it from the device (set_cuda_arch)."""
    expr = """
      let pkgs = import inputs.nixpkgs {{ system = "x86_64-linux"; overlays = [ flake.overlays.default ];
                                         config = {{ allowUnfree = true; cudaSupport = true; {extra} }}; }};
      in pkgs.sglang-eagle3.passthru.runtimeEnv
    """
    unchosen = ws.eval_expr(expr.format(extra=""))
    assert "TORCH_CUDA_ARCH_LIST" not in unchosen and "FLASHINFER_CUDA_ARCH_LIST" not in unchosen
    chosen = ws.eval_expr(expr.format(extra='cudaCapabilities = [ "9.0" "12.0" ];'))
    assert chosen["TORCH_CUDA_ARCH_LIST"] == "9.0;12.0" and "FLASHINFER_CUDA_ARCH_LIST" not in chosen
    assert ws.eval_expr('(flake.lib.mkStack { cudaCapabilities = [ "12.0" ]; }).package.passthru.runtimeEnv')[
        "TORCH_CUDA_ARCH_LIST"
    ] == "12.0"  # fmt: skip
    assert ws.eval_expr("inputs.nixpkgs.legacyPackages.x86_64-linux.config.cudaCapabilities or [ ]") == []


def test_module_uses_the_package_of_the_hosts_system(ws):
    host = """
      inputs.nixpkgs.lib.nixosSystem {{ modules = [ flake.nixosModules.default {{
        nixpkgs.hostPlatform = "{system}"; fileSystems."/" = {{ device = "/dev/sda1"; fsType = "ext4"; }};
        boot.loader.grub.device = "nodev"; system.stateVersion = "25.11"; services.sglang-eagle3.enable = true; }} ]; }}
    """
    package = ws.eval_expr(f"({host.format(system=SYSTEM)}).config.services.sglang-eagle3.package.drvPath")
    assert package == ws.eval(f"packages.{SYSTEM}.default.drvPath")
    other = ws.nix("eval", "--impure", "--expr",
                   f'let flake = builtins.getFlake "{ws.ref}"; inputs = flake.inputs; in '
                   f"({host.format(system='aarch64-linux')}).config.services.sglang-eagle3.package.drvPath",
                   check=False)  # fmt: skip
    assert other.returncode != 0
    assert "builds for x86_64-linux only, not aarch64-linux; set services.sglang-eagle3.package" in other.stderr


def test_dev_shell_installs_the_working_tree_editable(ws):
    shell = f"devShells.{SYSTEM}.default"
    assert "export REPO_ROOT=$(git rev-parse --show-toplevel)" in ws.eval(f"{shell}.shellHook")
    editable = f"packages.{SYSTEM}.default.passthru.editablePackage"
    # uv2nix's editable build: the installed package points at $REPO_ROOT/python at run time.
    assert ws.eval(f"{editable}.EDITABLE_ROOT") == "$REPO_ROOT/python"
    assert ws.eval(f"{editable}.outPath") in ws.eval(f"{shell}.passthru.devEnv.NIX_PYPROJECT_DEPS").split(":")
    # The shell finds the working tree's patches, not a store copy of them.
    assert ws.eval_expr(f"flake.{shell} ? CUDA_HOME && !(flake.{shell} ? SGLANG_EAGLE3_PATCHES)")


def test_gpu_check_defaults_are_the_example_hosts_model_directories(ws):
    check = ws.eval(f"packages.{SYSTEM}.gpu-throughput-check", apply="d: [ d.modelPath d.draftModelPath ]")
    host = ws.eval_expr(
        'let example = import "${flake}/modules/examples/8-gpu-host.nix" '
        "{ config.boot.kernelPackages.nvidiaPackages.latest = null; }; "
        "s = example.services.sglang-eagle3.settings; in [ s.model_path s.speculative_draft_model_path ]"
    )
    assert check == host
    assert ws.eval(f"packages.{SYSTEM}.gpu-throughput-check.requiredSystemFeatures") == ["cuda"]


def test_a_host_without_root_file_system_or_boot_loader_fails_nixos_own_assertions(ws):
    failed = ws.eval_expr(
        'let h = inputs.nixpkgs.lib.nixosSystem { system = "x86_64-linux"; modules = [ ]; }; in '
        "map (a: a.message) (builtins.filter (a: !a.assertion) h.config.assertions)"
    )
    assert "The ‘fileSystems’ option does not specify your root file system." in failed
    assert any("boot.loader.grub.devices" in m for m in failed)


# -- the SGLang 0.5.23 stack ------------------------------------------------------------------

NEWEST = "0.5.23"
NEWEST_PIN = pins.pins()["stacks"][NEWEST]["sglang"]


def nix_deps(ws, attribute: str) -> set[str]:
    """The store names (no hash) of an environment's Python packages, as uv2nix lists them."""
    deps = ws.eval(f"{attribute}.NIX_PYPROJECT_DEPS")
    return {re.sub(r"^/nix/store/[a-z0-9]{32}-", "", p) for p in deps.split(":")}


def test_the_0_5_23_package_is_its_lock_its_wheel_and_its_series(ws):
    package = f"packages.{SYSTEM}.sglang-eagle3-0_5_23"
    assert ws.eval(f"{package}.name") == "sglang-eagle3-0.1.0-sglang-0.5.23"
    assert ws.eval(f"packages.{SYSTEM}.default.name") == "sglang-eagle3-0.1.0", "the default stack keeps its name"
    assert ws.eval(f"{package}.passthru.stack.version") == NEWEST
    # CPython 3.12, as the default stack.
    assert ws.eval(f"{package}.passthru.pythonSet.python.pythonVersion") == "3.12"
    lock = tomllib.loads((REPO / "nix/stacks/sglang-0.5.23/uv.lock").read_text())
    locked = {p["name"]: p["version"] for p in lock["package"]}
    server = nix_deps(ws, f"{package}.passthru.serverEnv")
    for name in ("sglang", "torch", "sglang-kernel", "flashinfer-python", "transformers", "triton"):
        assert f"{name}-{locked[name]}" in server, f"{name} {locked[name]} not in the 0.5.23 server environment"
    assert locked["torch"] == "2.14.1" and locked["sglang"] == "0.5.23"
    # The CUDA libraries come from cudaPackages_13_0, not pip's wheels (as in the 0.5.9 stack),
    # also where they are reached through an extra (torch -> cuda-toolkit[cublas,cudart,...]);
    # cuDNN is the exception: torch 2.14.1's own (nix.md, "cuDNN").
    dropped = json.loads((REPO / "nix/stacks/sglang-0.5.23/wheel-libraries.json").read_text())["dropped"]
    assert {"nvidia-cublas", "nvidia-cuda-runtime", "nvidia-nccl-cu13"} <= set(dropped)
    assert not [d for d in server if re.sub(r"-[\d.]+$", "", d) in dropped], server
    assert f"nvidia-cudnn-cu13-{locked['nvidia-cudnn-cu13']}" in server
    # The test environment leaves out the kernel package, renamed sglang-kernel in 0.5.23.
    assert not [d for d in nix_deps(ws, f"{package}.passthru.testEnv") if d.startswith("sglang-kernel-")]
    # sglang is the patched wheel of this stack, the wrapper points at this stack's series.
    assert ws.eval(f"{package}.passthru.pythonSet.sglang.src.name") == "sglang-0.5.23-patched-wheel"
    series_dir = ws.eval(f"{package}.passthru.series.dir")
    assert series_dir.endswith("/patches/sglang-0.5.23")
    (info,) = json.loads(ws.nix("derivation", "show", f"{ws.ref}#{package}").stdout).values()
    # The series directory, copied to the store on its own (named after it).
    assert re.search(
        r"--set-default SGLANG_EAGLE3_PATCHES /nix/store/[a-z0-9]{32}-sglang-0\.5\.23\\n", json.dumps(info["env"])
    )


def test_the_0_5_23_wheel_derivation_fetches_the_pinned_wheel_and_applies_its_series(ws):
    pin = pins.pins()[NEWEST_PIN]
    assert pin["wheel"] == "sglang-0.5.23-cp312-cp312-manylinux_2_34_x86_64.whl"
    wheel = f"packages.{SYSTEM}.sglang-wheel-0_5_23"
    assert ws.eval(f"{wheel}.pristine.outputHash") == pin["sha256"]
    assert ws.eval(f"{wheel}.pristine.name") == pin["wheel"]
    drv = json.loads(ws.nix("derivation", "show", f"{ws.ref}#{wheel}").stdout)
    (info,) = drv.values()
    command = info["env"]["buildCommand"]
    assert re.search(r"bash /nix/store/[a-z0-9]{32}-patch-wheel\.sh ", command), command
    assert f"{pin['wheel']} $out" in command
    names = re.findall(r"/patches/sglang-0\.5\.23/([\w.-]+\.patch)", command)
    assert names == ws.eval_expr('(import "${flake}/nix/patch-series.nix" "0.5.23").names')
    assert names == patchset.read_series(REPO / "patches" / "sglang-0.5.23" / "series")
    assert ws.eval(f"checks.{SYSTEM}.patch-series-0_5_23.drvPath") == ws.eval(f"{wheel}.drvPath")


def test_the_0_5_23_wheel_builds_from_the_real_pinned_wheel(ws, newest_wheel, tmp_path):
    """The derivation run here on the real 0.5.23 wheel (put in the store as fetchurl would)."""
    if shutil.which("patch") is None:
        pytest.skip("needs GNU patch")
    pin = pins.pins()[NEWEST_PIN]
    named = tmp_path / pin["wheel"]
    shutil.copy(newest_wheel, named)
    assert ws.nix("store", "add-file", str(named)).stdout.strip() == ws.eval(
        f"packages.{SYSTEM}.sglang-wheel-0_5_23.pristine.outPath"
    )
    out = ws.nix("build", "--no-link", "--print-out-paths", "--option", "sandbox", "false",
                 f"{ws.ref}#packages.{SYSTEM}.sglang-wheel-0_5_23").stdout.strip()  # fmt: skip
    (built,) = Path(out).glob("*.whl")
    assert built.name == pin["wheel"]
    with zipfile.ZipFile(built) as archive, zipfile.ZipFile(newest_wheel) as pristine:
        files = lambda z: sorted(n for n in z.namelist() if not n.endswith("/"))  # noqa: E731
        assert files(archive) == files(pristine), "the same files, no more, no fewer"
        touched = {f for n in patchset.read_series(REPO / "patches/sglang-0.5.23/series")
                   for f in patchset.Patch(n, REPO / "patches/sglang-0.5.23" / n).files}  # fmt: skip
        for name in pristine.namelist():
            if not name.endswith(("/", "RECORD")) and name not in touched:
                assert archive.read(name) == pristine.read(name), f"{name} changed, but no patch touches it"


def test_the_0_5_23_app_and_the_module_check_use_the_0_5_23_package(ws):
    app = f"apps.{SYSTEM}.serve-eagle3-0_5_23"
    assert re.fullmatch(r"/nix/store/[a-z0-9]{32}-serve-eagle3-0\.5\.23", ws.eval(f"{app}.program"))
    assert ws.eval(f"{app}.meta.description") == "sglang-eagle3 serve"
    exe = ws.eval(f"packages.{SYSTEM}.sglang-eagle3-0_5_23", apply='p: p.outPath + "/bin/sglang-eagle3"')
    # The script's derivation (reading the script itself would build it during evaluation).
    context = f"builtins.attrNames (builtins.getContext flake.apps.{SYSTEM}.serve-eagle3-0_5_23.program)"
    (script_drv,) = ws.eval_expr(context)
    (info,) = json.loads(ws.nix("derivation", "show", f"{script_drv}^*").stdout).values()
    assert f"exec {exe} serve" in json.dumps(info["env"])
    host = ws.eval_expr(
        'let h = inputs.nixpkgs.lib.nixosSystem { system = "x86_64-linux"; modules = [ flake.nixosModules.default '
        '"${flake}/modules/examples/8-gpu-host.nix" { services.sglang-eagle3.package = '
        "flake.packages.x86_64-linux.sglang-eagle3-0_5_23; } ]; }; "
        "in h.config.systemd.services.sglang-eagle3.serviceConfig.ExecStart"
    )
    assert host.startswith(f"{exe} serve --config ")


def test_lib_mk_stack_picks_the_version_and_names_the_known_ones(ws):
    assert ws.eval_expr('(flake.lib.mkStack { version = "0.5.23"; }).package.passthru.stack.version') == NEWEST
    assert ws.eval_expr("(flake.lib.mkStack { }).package.passthru.stack.version") == "0.5.9"
    chosen = ws.eval_expr(
        '(flake.lib.mkStack { version = "0.5.23"; cudaCapabilities = [ "12.0" ]; }).package.passthru.runtimeEnv'
    )
    assert chosen["TORCH_CUDA_ARCH_LIST"] == "12.0"
    unknown = f'((builtins.getFlake "{ws.ref}").lib.mkStack {{ version = "0.6"; }}).package.name'
    failed = ws.nix("eval", "--impure", "--expr", unknown, check=False)
    assert failed.returncode != 0
    assert "nix/pins.json has no stack '0.6'; the pinned stacks are: 0.5.23, 0.5.9" in failed.stderr


def test_upgrade_ab_serves_the_default_stack_then_the_newest_through_bench_ab(ws):
    """`nix run .#upgrade-ab`: side A is the default stack's program, side B the newest stack's, each labelled
    with its SGLang version; what bench ab does with them is tests/test_bench_ab.py's."""
    exe = {v: ws.eval(f"packages.{SYSTEM}.sglang-eagle3-{v}", apply='p: p.outPath + "/bin/sglang-eagle3"')
           for v in ("0_5_9", "0_5_23")}  # fmt: skip
    context = f"builtins.attrNames (builtins.getContext flake.apps.{SYSTEM}.upgrade-ab.program)"
    (script_drv,) = ws.eval_expr(context)
    (info,) = json.loads(ws.nix("derivation", "show", f"{script_drv}^*").stdout).values()
    script = info["env"]["text"]
    expected = (f"exec {exe['0_5_9']} bench ab --a {exe['0_5_9']} --a-label sglang-0.5.9 "
                f"--b {exe['0_5_23']} --b-label sglang-0.5.23 " '"$@"')  # fmt: skip
    assert expected in script, script
