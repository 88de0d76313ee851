"""services.sglang-router, the cluster example and the router VM test, with nixpkgs' real lib.

Evaluated with tests/nix/module-harness.nix (NIXPKGS_LIB: a copy of nixpkgs' lib/); the
rendered command line is parsed by the router's own parser (the smg wheel), and
the unit is checked with systemd-analyze. The VM test itself needs KVM and nixpkgs: here
its nodes are evaluated with the same harness and its test script is checked as Python.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO
from support.nix_harness import NIXPKGS_LIB, evaluate_module, evaluate_module_error, needs_lib, nix_eval, verify_unit

CLUSTER = REPO / "modules" / "examples" / "cluster.nix"
VM_TEST = REPO / "nix" / "tests" / "router-vm.nix"
needs_systemd = pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="needs systemd-analyze")


def cluster_host(name: str, args: str = "{ }") -> str:
    return f'(import {CLUSTER} {args})."{name}"'


def router_args(service: dict):
    """The unit's command line, parsed by the router's own parser (smg's, as the router will at start)."""
    from smg.launch_router import parse_router_args

    exe, *argv = shlex.split(service["serviceConfig"]["ExecStart"])
    assert exe.endswith("/bin/sglang-eagle3-router")
    return parse_router_args(argv)


@needs_lib
def test_cluster_router_host_renders_what_the_router_accepts():
    out = evaluate_module(cluster_host("router"))
    assert out["failedAssertions"] == [] and out["warnings"] == []
    service = out["services"]["sglang-router"]
    args = router_args(service)
    assert args.worker_urls == ["http://10.0.0.11:30000", "http://10.0.0.12:30000"]
    assert (args.host, args.port, args.policy) == ("0.0.0.0", 30000, "cache_aware")
    assert (args.prometheus_host, args.prometheus_port) == ("0.0.0.0", 29000)
    assert args.worker_startup_timeout_secs == 7320 and args.health_check_interval_secs == 10
    assert (args.health_failure_threshold, args.health_success_threshold) == (3, 2)
    assert (args.retry_max_retries, args.retry_initial_backoff_ms, args.retry_backoff_multiplier) == (5, 50, 1.5)
    assert (args.cb_failure_threshold, args.cb_timeout_duration_secs) == (10, 60)
    assert args.cache_threshold == 0.3 and args.request_timeout_secs == 1800
    assert not args.disable_retries and not args.disable_circuit_breaker
    # The key travels only as a credential: no key on the command line.
    assert args.api_key is None
    sc = service["serviceConfig"]
    assert sc["LoadCredential"] == ["api-key:/run/secrets/sglang-api-key"]
    assert sc["Type"] == "exec" and sc["Restart"] == "on-failure" and sc["DynamicUser"] is True
    assert sc["TimeoutStopSec"] == 180 + 15
    assert out["allowedTCPPorts"] == [30000]


@needs_lib
def test_router_options_render_to_the_flags_the_router_reads():
    config = """{ services.sglang-router = {
        enable = true; workers = [ "http://a:1" "https://b:2/" ]; policy = "power_of_two";
        retries.enable = false; circuitBreaker.enable = false; maxConcurrentRequests = 64;
        healthCheck = { endpoint = "/health_generate"; intervalSec = 7; timeoutSec = 3; };
        requestTimeoutSec = 99; logLevel = "warn"; extraArgs = [ "--queue-size" "7" ];
        metrics = { port = 9100; openFirewall = true; }; openFirewall = true; }; }"""
    out = evaluate_module(config)
    assert out["failedAssertions"] == []
    args = router_args(out["services"]["sglang-router"])
    assert args.worker_urls == ["http://a:1", "https://b:2/"] and args.policy == "power_of_two"
    assert args.disable_retries and args.disable_circuit_breaker and args.max_concurrent_requests == 64
    assert (args.health_check_endpoint, args.health_check_interval_secs, args.health_check_timeout_secs) == (
        "/health_generate", 7, 3,
    )  # fmt: skip
    assert args.request_timeout_secs == 99 and args.log_level == "warn" and args.queue_size == 7
    assert (args.host, args.prometheus_host, args.prometheus_port) == ("127.0.0.1", "127.0.0.1", 9100)
    assert out["allowedTCPPorts"] == [9100, 30000]  # NixOS reads the list back sorted
    assert out["services"]["sglang-router"]["serviceConfig"]["LoadCredential"] == []


@needs_lib
@pytest.mark.parametrize(
    "args, hosts",
    [
        ("{ gpuHosts = 3; }", {"gpu-1": "10.0.0.11", "gpu-2": "10.0.0.12", "gpu-3": "10.0.0.13"}),
        ('{ gpuHosts = { left = "192.168.7.2"; right = "192.168.7.3"; }; port = 31000; }',
         {"left": "192.168.7.2", "right": "192.168.7.3"}),
    ],
)  # fmt: skip
def test_cluster_gpu_hosts_are_the_routers_workers(args, hosts):
    names = nix_eval(f"builtins.attrNames (import {CLUSTER} {args})")
    assert sorted(names) == sorted(["router", *hosts])
    router = evaluate_module(cluster_host("router", args))
    workers = router_args(router["services"]["sglang-router"]).worker_urls
    router_credential = router["services"]["sglang-router"]["serviceConfig"]["LoadCredential"]
    expected = []
    for name, address in hosts.items():
        gpu = evaluate_module(cluster_host(name, args))
        assert gpu["failedAssertions"] == []
        settings = gpu["settings"]
        assert settings["host"] == "0.0.0.0" and settings["tp_size"] == 8  # a whole replica per host
        expected.append(f"http://{address}:{settings['port']}")
        assert gpu["allowedTCPPorts"] == [settings["port"]]
        # One key both ways: the GPU hosts get the very file the router sends from.
        assert gpu["services"]["sglang-eagle3"]["serviceConfig"]["LoadCredential"] == router_credential
        assert "sglang-router" not in gpu["services"]
    assert sorted(workers) == sorted(expected)


BROKEN = [
    ("workers = lib.mkForce [ ];", "workers is empty"),
    ('workers = lib.mkForce [ "http://10.0.0.11:30000" "http://10.0.0.11:30000/" ];', "more than once"),
    ("metrics.port = 30000;", "metrics.port (30000) must differ"),
    ("healthCheck.failureThreshold = 0;", "healthCheck.failureThreshold must be at least 1"),
    ("healthCheck.successThreshold = 0;", "healthCheck.successThreshold must be at least 1"),
    ("circuitBreaker.failureThreshold = 0;", "circuitBreaker.failureThreshold must be at least 1"),
    ("circuitBreaker.successThreshold = 0;", "circuitBreaker.successThreshold must be at least 1"),
    ("retries.maxRetries = 0;", "retries.maxRetries must be at least 1"),
    ("retries.backoffMultiplier = 0.5;", "retries.backoffMultiplier must be at least 1"),
    ("cacheAware.balanceRelThreshold = 0.9;", "balanceRelThreshold must be at least 1"),
    ("retries = { initialBackoffMs = 500; maxBackoffMs = 100; };", "maxBackoffMs (100) is below initialBackoffMs"),
    ("healthCheck.timeoutSec = 20;", "timeoutSec must not exceed healthCheck.intervalSec"),
    ('extraArgs = [ "--api-key" "k" ];', "must not carry the API key"),
    ('extraArgs = [ "--api-key=k" ];', "must not carry the API key"),
    ('apiKeyFile = lib.mkForce "/nix/store/abc-key";', "must not be in the Nix store"),
]


@needs_lib
@pytest.mark.parametrize("override, message", BROKEN, ids=[m for _, m in BROKEN])
def test_router_assertions_fire(override, message):
    config = f"{{ lib, ... }}: {{ imports = [ {cluster_host('router')} ]; services.sglang-router = {{ {override} }}; }}"
    failed = evaluate_module(f"({config})")["failedAssertions"]
    assert any(message in m for m in failed), failed


@needs_lib
@pytest.mark.parametrize(
    "value, option",
    [
        ('workers = [ "10.0.0.11:30000" ];', "workers"),
        ('workers = [ "http://10.0.0.11:30000/v1" ];', "workers"),
        ('policy = "fastest";', "policy"),
        ("cacheAware.cacheThreshold = 1.5;", "cacheThreshold"),
        ("retries.jitterFactor = 2;", "jitterFactor"),
        ('apiKeyFile = "relative/key";', "apiKeyFile"),
        ("port = 70000;", "port"),
    ],
)
def test_router_rejects_bad_values_by_type(value, option):
    base = '{ services.sglang-router = { enable = true; workers = [ "http://a:1" ]; }; }'
    stderr = evaluate_module_error(f"{{ imports = [ {base} ]; services.sglang-router.{value} }}")
    assert option in stderr and "is not of type" in stderr


@needs_lib
def test_an_open_router_without_a_key_is_warned_about():
    out = evaluate_module(
        '{ services.sglang-router = { enable = true; host = "0.0.0.0"; workers = [ "http://a:1" ]; }; }'
    )
    assert out["failedAssertions"] == []
    assert len(out["warnings"]) == 1 and "without an API key" in out["warnings"][0]
    assert evaluate_module(cluster_host("router"))["warnings"] == []


@needs_lib
def test_every_router_option_is_documented_and_in_the_readme():
    options = evaluate_module("{ }")["routerOptions"]

    def leaves(tree, prefix=""):
        for name, value in tree.items():
            if isinstance(value, dict):
                yield from leaves(value, f"{prefix}{name}.")
            else:
                yield f"{prefix}{name}", value

    documented = dict(leaves(options))
    assert len(documented) > 30
    assert all(isinstance(d, str) and len(d) > 15 for d in documented.values()), documented
    readme = (REPO / "docs" / "router.md").read_text()
    section = readme[readme.index("## NixOS: `services.sglang-router`") :]
    for name in documented:
        top = name.split(".")[0]
        assert f"`{top}" in section or f"{top}." in section, f"{name} is not in docs/router.md's NixOS section"


@needs_lib
@needs_systemd
def test_router_unit_verifies_and_its_exposure_is_printed(tmp_path):
    out = evaluate_module(cluster_host("router"))
    service = out["services"]["sglang-router"]
    exe = tmp_path / "sglang-eagle3-router"
    exe.write_text("#!/bin/sh\n")
    exe.chmod(0o755)
    router_exposure = verify_unit(out["units"]["sglang-router.service"], "sglang-router.service", tmp_path, exe)
    # The GPU server's unit, rendered the same way: the router needs less, so it must expose no more.
    server = evaluate_module(cluster_host("gpu-1"))["units"]["sglang-eagle3.service"]
    server_exposure = verify_unit(server, "sglang-eagle3.service", tmp_path, exe)
    print(f"\nsglang-router.service exposure: {router_exposure} (sglang-eagle3.service: {server_exposure})")
    assert router_exposure <= server_exposure
    sc = service["serviceConfig"]
    assert sc["PrivateDevices"] is True and sc["MemoryDenyWriteExecute"] is True
    assert sc["CapabilityBoundingSet"] == [""] and sc["ProtectSystem"] == "strict"
    if os.environ.get("OLLAMA_MODULE"):
        from support.nix_harness import ollama_exposure

        reference = ollama_exposure(Path(os.environ["OLLAMA_MODULE"]), tmp_path, exe)
        print(f"nixpkgs ollama.service exposure: {reference}")
        assert router_exposure <= reference


# -- the VM test (nix/tests/router-vm.nix), as far as it evaluates without nixpkgs ----------------


def vm_test(attr: str) -> str:
    """An attribute of the VM test's module, with stub packages for what nixpkgs would supply."""
    return f"""
      let lib = import {NIXPKGS_LIB};
          stub = name: {{ type = "derivation"; inherit name; outPath = "/nix/store/stub-${{name}}";
                          meta.mainProgram = name; interpreter = "/nix/store/stub-python3/bin/python3"; }};
          test = import {VM_TEST} {{ routerPackage = stub "sglang-router"; }} {{ inherit lib; }};
          # python3.withPackages: an environment with its own interpreter (the packages are stubs).
          withPackages = f: assert builtins.isList (f {{ prometheus-client = stub "prometheus-client"; }});
            stub "python3-env" // {{ interpreter = "/nix/store/stub-python3-env/bin/python3"; }};
          pkgs = {{ curl = stub "curl"; jq = stub "jq"; python3 = stub "python3" // {{ inherit withPackages; }}; }};
      in {attr}
    """


@needs_lib
def test_vm_test_router_node_is_a_valid_router_host():
    # The node as a module; the harness's stub package stands in for the flake's router package.
    node = vm_test('{ imports = [ test.nodes.router ]; services.sglang-router.package = lib.mkForce (stub "r"); }')
    out = evaluate_module(f"({node})")
    assert out["failedAssertions"] == [] and out["warnings"] == []
    service = out["services"]["sglang-router"]
    args = router_args(service)
    assert args.worker_urls == ["http://worker1:30000", "http://worker2:30000"]
    assert (args.host, args.port, args.policy, args.health_check_interval_secs) == ("0.0.0.0", 30000, "round_robin", 1)
    assert service["serviceConfig"]["LoadCredential"] == ["api-key:/run/secrets/sglang-api-key"]
    assert service["wantedBy"] == [] and out["allowedTCPPorts"] == [30000]


@needs_lib
def test_vm_test_workers_run_the_stand_in_with_the_same_key():
    worker = nix_eval(
        vm_test("(lib.fix (config: test.nodes.worker1 { inherit pkgs config; })).systemd.services.sglang-stand-in")
    )
    assert worker["serviceConfig"]["LoadCredential"] == "api-key:/run/secrets/sglang-api-key"
    # The stand-in's directory as it is here (the store path is its content hash).
    assert worker["environment"]["PYTHONPATH"] == nix_eval(f'"${{{REPO}/tests/stand_ins/fake_sglang}}"')
    assert "/nix/store/stub-python3-env/bin/python3 -m sglang.launch_server" in worker["script"]
    assert "--port 30000" in worker["script"]


@needs_lib
def test_vm_test_script_is_valid_python(tmp_path):
    info = nix_eval(vm_test("{ inherit (test) name testScript; nodes = builtins.attrNames test.nodes; }"))
    assert info["name"] == "sglang-router" and sorted(info["nodes"]) == ["router", "worker1", "worker2"]
    script = tmp_path / "test_script.py"
    # The test driver defines these names for the script.
    script.write_text("from test_driver import start_all, subtest, router, worker1, worker2  # noqa: F401\n"
                      + info["testScript"])  # fmt: skip
    compile(script.read_text(), str(script), "exec")
    ruff = shutil.which("ruff") or shutil.which("ruff", path=str(Path(sys.executable).parent))
    if ruff:  # the driver lints the script with pyflakes; ruff's F rules are the same checks
        lint = subprocess.run([ruff, "check", "--no-cache", "--isolated", "--select", "F", str(script)],
                              capture_output=True, text=True)  # fmt: skip
        assert lint.returncode == 0, lint.stdout + script.read_text()
    for service in ("sglang-stand-in.service", "sglang-router.service"):
        assert service in info["testScript"]
    assert json.dumps("/run/secrets/sglang-api-key")[1:-1] in info["testScript"]
