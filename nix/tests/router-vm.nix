# NixOS VM test: services.sglang-router in front of two worker VMs, with the API key
# delivered by LoadCredential on every host. The workers run this project's stand-in
# SGLang server (tests/stand_ins/fake_sglang: Python with prometheus_client): SGLang needs
# GPUs, the router only needs SGLang's HTTP API. A request goes through the router (from
# another VM, so openFirewall is tested too), one worker is stopped, and requests are still
# answered.
#
#   pkgs.testers.runNixOSTest (import ./nix/tests/router-vm.nix {
#     routerPackage = self.packages.x86_64-linux.sglang-router;  # has bin/sglang-eagle3-router
#   })
{
  # An environment with sglang-eagle3-router and smg 1.13.0 (no CUDA needed).
  routerPackage,
  # The module under test; modules/sglang-eagle3.nix imports it too.
  routerModule ? ../../modules/sglang-router.nix,
  standIn ? ../../tests/stand_ins/fake_sglang,
}:
{ lib, ... }:
let
  port = 30000;
  metricsPort = 29000;
  keyPath = "/run/secrets/sglang-api-key";

  worker =
    { config, pkgs, ... }:
    {
      networking.firewall.allowedTCPPorts = [ port ];
      environment.systemPackages = [ pkgs.curl ];
      # The stand-in's one import beyond the standard library (its metrics endpoint);
      # tests/test_flake.py checks it against the stand-in's imports.
      system.build.sglangStandInPython = pkgs.python3.withPackages (ps: [ ps.prometheus-client ]);
      # Started by the test script once the key is in place (as a secrets manager would).
      systemd.services.sglang-stand-in = {
        description = "Stand-in SGLang server";
        after = [ "network.target" ];
        environment.PYTHONPATH = "${standIn}";
        script = ''
          export FAKE_SGLANG_API_KEY_FILE="$CREDENTIALS_DIRECTORY/api-key"
          export FAKE_SGLANG_SEND_LOG="$STATE_DIRECTORY/sent.jsonl"
          exec ${config.system.build.sglangStandInPython.interpreter} -m sglang.launch_server \
            --host 0.0.0.0 --port ${toString port} --model-path stand-in/kimi
        '';
        serviceConfig = {
          DynamicUser = true;
          StateDirectory = "sglang-stand-in";
          LoadCredential = "api-key:${keyPath}";
        };
      };
    };
in
{
  name = "sglang-router";

  nodes = {
    worker1 = worker;
    worker2 = worker;

    router =
      { pkgs, ... }:
      {
        imports = [ routerModule ];
        environment.systemPackages = [
          pkgs.curl
          pkgs.jq
        ];
        services.sglang-router = {
          enable = true;
          package = routerPackage;
          host = "0.0.0.0";
          inherit port;
          openFirewall = true;
          metrics.port = metricsPort;
          workers = [
            "http://worker1:${toString port}"
            "http://worker2:${toString port}"
          ];
          policy = "round_robin";
          apiKeyFile = keyPath;
          # Notice the stopped worker within seconds.
          healthCheck = {
            intervalSec = 1;
            timeoutSec = 1;
            failureThreshold = 1;
            successThreshold = 1;
          };
          circuitBreaker.timeoutSec = 1;
          workerCheckIntervalSec = 1;
        };
        # Started by the test script, after the key file exists.
        systemd.services.sglang-router.wantedBy = lib.mkForce [ ];
      };
  };

  testScript = ''
    import json
    import secrets

    key = "vm-" + secrets.token_hex(16)
    auth = f"-H 'Authorization: Bearer {key}'"
    body = json.dumps({"text": "hello", "sampling_params": {"max_new_tokens": 8}, "stream": False})

    def generate(client, host="127.0.0.1", headers=auth):
        out = client.succeed(
            f"curl -sf {headers} -H 'Content-Type: application/json' -d '{body}' http://{host}:${toString port}/generate"
        )
        assert json.loads(out)["meta_info"]["completion_tokens"] == 8, out

    def healthy_workers():
        out = router.succeed(f"curl -sf {auth} http://127.0.0.1:${toString port}/workers")
        return sorted(w["url"] for w in json.loads(out)["workers"] if w["is_healthy"])

    start_all()
    for machine in (router, worker1, worker2):
        machine.wait_for_unit("multi-user.target")
        machine.succeed(f"install -d -m 0700 /run/secrets && (umask 077; printf %s {key} > ${keyPath})")
    for machine in (worker1, worker2):
        machine.systemctl("start sglang-stand-in.service")
        machine.wait_for_open_port(${toString port})
    router.systemctl("start sglang-router.service")
    router.wait_for_unit("sglang-router.service")
    router.wait_for_open_port(${toString port})

    with subtest("the router adds both workers and answers through them"):
        router.wait_until_succeeds(
            f"curl -sf {auth} http://127.0.0.1:${toString port}/workers"
            " | jq -e '[.workers[] | select(.is_healthy)] | length == 2'",
            timeout=120,
        )
        for _ in range(4):
            generate(router)
        # From another host: the router's port is open, the key is required.
        generate(worker1, host="router")
        worker1.fail(f"curl -sf -d '{body}' http://router:${toString port}/generate")
        for machine in (worker1, worker2):
            served = machine.succeed("wc -l < /var/lib/sglang-stand-in/sent.jsonl").strip()
            assert int(served) >= 2, f"{machine.name} answered {served} requests"

    with subtest("the key is not on the router's command line or in its journal"):
        router.fail(f"grep -a {key} /proc/$(systemctl show -P MainPID sglang-router.service)/cmdline")
        router.fail(f"journalctl -u sglang-router.service | grep {key}")

    with subtest("one worker stopped: requests are still answered"):
        worker1.systemctl("stop sglang-stand-in.service")
        for _ in range(10):
            generate(router)
        router.wait_until_succeeds(
            f"curl -sf {auth} http://127.0.0.1:${toString port}/workers"
            " | jq -e '[.workers[] | select(.is_healthy)] | length == 1'",
            timeout=60,
        )
        assert healthy_workers() == ["http://worker2:${toString port}"], healthy_workers()
        for _ in range(10):
            generate(router)

    with subtest("the router's metrics show the stopped worker"):
        metrics = router.succeed("curl -sf http://127.0.0.1:${toString metricsPort}/metrics")
        assert 'smg_worker_health{worker="http://worker1:${toString port}"} 0' in metrics, metrics
        assert 'smg_worker_health{worker="http://worker2:${toString port}"} 1' in metrics, metrics
  '';
}
