# The NixOS module, evaluated with the real NixOS module system in example hosts (the
# 8-GPU host, rank 0 of a two-host deployment) and in broken configurations.
#
# What can be decided from the configuration is checked at evaluation time, so
# `nix flake check --no-build` already fails on it: no failed assertion (the hosts get the
# root file system, boot loader and driver of nix/gpu-host.nix), the unit's
# settings, credentials, hardening and dependencies. The build step then runs
# scripts/verify-units.sh (systemd-analyze verify and security) on the rendered units, and
# the launcher's own settings loader on the rendered settings file. The module's package is
# the tools environment (the launcher without the CUDA stack), so these checks stay cheap.
# No check builds a host's system (system.build.toplevel: kernel, NVIDIA kernel module);
# NixOS's assertions and warnings are forced as building it would (assertWarn below).
{
  pkgs,
  lib,
  nixpkgs,
  module,
  package,
  routerPackage,
  # Other stacks' server packages by name (0_5_23 = packages.sglang-eagle3-0_5_23): each is
  # given to services.sglang-eagle3.package in a host of its own (module-package-<name>).
  stackPackages ? { },
}:
let
  gpuHost = import ./gpu-host.nix { inherit lib; };
  inherit (gpuHost) failedAssertions settingsOf readsItsSettings;
  evalHost =
    modules:
    nixpkgs.lib.nixosSystem {
      system = "x86_64-linux";
      modules = [
        module
        gpuHost.hardware
        {
          services.sglang-eagle3.package = package;
          services.sglang-router.package = routerPackage;
        }
      ]
      ++ modules;
    };
  unit = host: name: host.config.systemd.units.${name}.unit;

  # Evaluation-time expectations: [ { ok; what; } ] -> true, or a throw naming every miss.
  expect =
    check: expectations:
    let
      misses = map (e: e.what) (lib.filter (e: !e.ok) expectations);
    in
    lib.assertMsg (misses == [ ]) "module check ${check}:\n${lib.concatMapStringsSep "\n" (m: "  - ${m}") misses}";

  # What building the host's system.build.toplevel checks first: every NixOS assertion holds
  # (a failed one throws, listing all of them) and the warnings are shown, as
  # nixos/modules/system/activation/top-level.nix does with
  # `lib.asserts.checkAssertWarn config.assertions config.warnings baseSystem`. The checks
  # wrap their derivations in it instead of depending on the toplevel: a whole system, with
  # the kernel and the NVIDIA driver's kernel module, which the public cache does not have.
  assertWarn = host: lib.asserts.checkAssertWarn host.config.assertions host.config.warnings;

  noFailedAssertions = host: {
    ok = failedAssertions host == [ ];
    what = "NixOS assertions failed: ${builtins.toJSON (failedAssertions host)}";
  };

  # Build step shared by the host checks: the units as systemd reads them, and the settings
  # file as the launcher reads it.
  verifyHost =
    name: host: units:
    let
      service = host.config.systemd.services.sglang-eagle3;
    in
    assertWarn host (
      pkgs.runCommand "sglang-eagle3-${name}"
        {
          nativeBuildInputs = [
            pkgs.systemd
            package
          ];
          units = map (u: "${unit host u}/${u}") units;
          settings = lib.last (lib.splitString " " service.serviceConfig.ExecStart);
        }
        ''
          export HOME=$TMPDIR
          bash ${./scripts/verify-units.sh} $units | tee $out
          sglang-eagle3 settings show --config "$settings" > /dev/null
        ''
    );

  host8 = evalHost [ ../modules/examples/8-gpu-host.nix ];
  twoNode = evalHost [ ../modules/examples/two-node.nix ];
  broken = {
    "needs distInitAddr" = evalHost [
      ../modules/examples/two-node.nix
      { services.sglang-eagle3.distInitAddr = lib.mkForce null; }
    ];
    "GPUs per host" = evalHost [
      ../modules/examples/8-gpu-host.nix
      { services.sglang-eagle3.gpus = lib.mkForce [ 0 1 2 3 ]; }
    ];
    "must be below nnodes" = evalHost [
      ../modules/examples/two-node.nix
      { services.sglang-eagle3.nodeRank = lib.mkForce 2; }
    ];
  };

  # The 8-GPU host with Prometheus and Grafana on the same machine.
  monitored = evalHost [
    ../modules/examples/8-gpu-host.nix
    {
      services.prometheus.enable = true;
      services.grafana = {
        enable = true;
        settings.security.secret_key = "$__file{/var/lib/grafana/secret_key}";
      };
    }
  ];
  prometheus = monitored.config.services.prometheus;

  # A host whose weights are pinned by locks (of made-up repositories: nothing is fetched at
  # evaluation) with a hub token; the module sets the model paths itself.
  pinned = evalHost [
    {
      services.sglang-eagle3.enable = true;
      services.sglang-eagle3.models = {
        target.lockFile = ./tests/example-target.lock.json;
        draft.lockFile = ./tests/example-draft.lock.json;
        tokenFile = "/run/secrets/hf-token";
      };
    }
  ];

  # modules/examples/cluster.nix: one router host and two GPU hosts.
  cluster = lib.mapAttrs (_: host: evalHost [ host ]) (import ../modules/examples/cluster.nix { gpuHosts = 2; });
  brokenRouter = {
    "workers is empty" = evalHost [ { services.sglang-router.enable = true; } ];
    "more than once" = evalHost [
      {
        services.sglang-router = {
          enable = true;
          workers = [
            "http://10.0.0.11:30000"
            "http://10.0.0.11:30000/"
          ];
        };
      }
    ];
    "must differ from services.sglang-router.port" = evalHost [
      {
        services.sglang-router = {
          enable = true;
          workers = [ "http://10.0.0.11:30000" ];
          metrics.port = 30000;
        };
      }
    ];
    "must not carry the API key" = evalHost [
      {
        services.sglang-router = {
          enable = true;
          workers = [ "http://10.0.0.11:30000" ];
          extraArgs = [ "--api-key=secret" ];
        };
      }
    ];
  };

  sc8 = host8.config.systemd.services.sglang-eagle3.serviceConfig;
  settings8 = settingsOf host8;
  bench8 = host8.config.systemd.services.sglang-eagle3-bench;
in
{
  module-8-gpu-host =
    assert expect "module-8-gpu-host" [
      (noFailedAssertions host8)
      {
        ok = sc8.Type == "notify" && sc8.NotifyAccess == "main";
        what = "the server unit is Type=notify";
      }
      {
        ok = sc8.LoadCredential == [ "api-key:/run/secrets/sglang-api-key" ];
        what = "the API key is a credential";
      }
      {
        ok = host8.config.systemd.services.sglang-eagle3.environment.CUDA_VISIBLE_DEVICES == "0,1,2,3,4,5,6,7";
        what = "CUDA_VISIBLE_DEVICES lists the 8 GPUs";
      }
      {
        ok =
          sc8.PrivateDevices == false && sc8.ProtectSystem == "strict" && sc8.LimitMEMLOCK == "infinity" && !(sc8 ? MemoryDenyWriteExecute);
        what = "hardening relaxed only where CUDA needs it";
      }
      {
        ok = lib.elem "sglang-eagle3.service" bench8.after;
        what = "the benchmark runs after the server is ready";
      }
      {
        ok = host8.config.networking.firewall.allowedTCPPorts == [ 30000 ];
        what = "the firewall opens the HTTP port only";
      }
      {
        ok =
          host8.config.programs.nix-required-mounts.allowedPatterns.sglang-eagle3-models.paths == [
            "/var/lib/models/Kimi-K2.5-NVFP4"
            "/var/lib/models/Kimi-K25-eagle3"
          ];
        what = "GPU check sandboxes see the model directories";
      }
      {
        ok = lib.all (f: lib.elem f host8.config.nix.settings.system-features) [
          "cuda"
          "nixos-test"
          "benchmark"
          "big-parallel"
          "kvm"
        ];
        what = "gpuChecks adds the cuda system feature and keeps the host's defaults: ${builtins.toJSON host8.config.nix.settings.system-features}";
      }
      {
        ok = readsItsSettings host8;
        what = "the server reads the settings file settingsOf renders";
      }
      {
        ok =
          settings8.tp_size == 8
          && settings8.speculative_algorithm == "EAGLE3"
          && settings8.model_path == "/var/lib/models/Kimi-K2.5-NVFP4"
          && !(settings8 ? api_key_file);
        what = "the settings file holds the tuned defaults, the host's values and no secret";
      }
    ];
    verifyHost "module-8-gpu-host" host8 [
      "sglang-eagle3.service"
      "sglang-eagle3-bench.service"
    ];

  module-two-node =
    let
      settings = settingsOf twoNode;
    in
    assert expect "module-two-node" [
      (noFailedAssertions twoNode)
      {
        ok = twoNode.config.networking.firewall.allowedTCPPorts == [ 50000 ];
        what = "rank 0 opens the rendezvous port";
      }
      {
        ok = settings.nnodes == 2 && settings.node_rank == 0 && settings.dist_init_addr == "10.0.0.1:50000";
        what = "the multi-host settings reach the launcher";
      }
      {
        ok = !settings.enable_flashinfer_allreduce_fusion && settings8.enable_flashinfer_allreduce_fusion;
        what = "FlashInfer's all-reduce fusion, one node only, is off by default across hosts (on for one)";
      }
    ];
    verifyHost "module-two-node" twoNode [ "sglang-eagle3.service" ];

  # services.sglang-eagle3.monitoring: the scrape jobs, the rule files (checked by promtool,
  # with the Prometheus configuration they are part of) and the provisioned dashboard.
  module-monitoring =
    let
      jobs = lib.listToAttrs (map (j: lib.nameValuePair j.job_name j) prometheus.scrapeConfigs);
      providers = monitored.config.services.grafana.provision.dashboards.settings.providers;
      # prometheus.yml as nixpkgs' module writes it: the declared fields, nulls left out.
      prometheusYml = pkgs.writeText "prometheus.yml" (
        builtins.toJSON {
          scrape_configs = map (lib.filterAttrsRecursive (_: v: v != null)) prometheus.scrapeConfigs;
          rule_files = map toString prometheus.ruleFiles;
        }
      );
    in
    assert expect "module-monitoring" [
      (noFailedAssertions monitored)
      {
        ok = jobs ? sglang-eagle3 && jobs.sglang-eagle3.static_configs == [ { targets = [ "127.0.0.1:30000" ]; labels = { }; } ];
        what = "Prometheus scrapes the server on loopback: ${builtins.toJSON (jobs.sglang-eagle3 or null)}";
      }
      {
        ok = (jobs.sglang-eagle3-health.metrics_path or null) == "/health_generate";
        what = "Prometheus scrapes /health_generate, so `up` shows readiness";
      }
      {
        ok = builtins.length prometheus.ruleFiles == 2;
        what = "the alert rules and their thresholds are loaded";
      }
      {
        ok = map (p: baseNameOf (toString p.options.path)) providers == [ "sglang-eagle3-dashboard.json" ];
        what = "Grafana provisions the dashboard";
      }
    ];
    assertWarn monitored (
      pkgs.runCommand "sglang-eagle3-module-monitoring"
        {
          nativeBuildInputs = [
            # promtool is in prometheus' `cli` output (pkgs/by-name/pr/prometheus/package.nix:
            # `moveToOutput bin/promtool $cli`), not in `out`.
            pkgs.prometheus.cli
            pkgs.jq
          ];
          dashboards = map (p: p.options.path) providers;
        }
        ''
          promtool check config ${prometheusYml}
          for d in $dashboards; do jq -e '.panels | length > 0' "$d" > /dev/null; done
          touch $out
        ''
    );

  # services.sglang-eagle3.models: the fetch-and-verify unit runs before the server, which
  # starts offline on the fetched directories and never sees the token.
  module-models =
    let
      server = pinned.config.systemd.services.sglang-eagle3;
      models = pinned.config.systemd.services.sglang-eagle3-models;
      settings = settingsOf pinned;
    in
    assert expect "module-models" [
      (noFailedAssertions pinned)
      {
        ok = lib.elem "sglang-eagle3-models.service" server.requires && lib.elem "sglang-eagle3-models.service" server.after;
        what = "the server Requires= and After= the models unit";
      }
      {
        ok = (server.environment.HF_HUB_OFFLINE or null) == "1";
        what = "the server runs with the hub offline";
      }
      {
        ok =
          settings.model_path == "/var/lib/sglang-eagle3/models/example-target"
          && settings.speculative_draft_model_path == "/var/lib/sglang-eagle3/models/example-draft";
        what = "the server loads the fetched directories: ${settings.model_path}, ${settings.speculative_draft_model_path}";
      }
      {
        ok = models.serviceConfig.LoadCredential == [ "hf-token:/run/secrets/hf-token" ] && !(server.serviceConfig ? LoadCredential && lib.any (lib.hasPrefix "hf-token") (lib.toList server.serviceConfig.LoadCredential));
        what = "only the models unit gets the hub token, as a credential";
      }
      {
        ok = !(lib.hasInfix "hf-token" (builtins.toJSON server.environment)) && !(lib.hasInfix "/run/secrets/hf-token" (server.serviceConfig.ExecStart or ""));
        what = "the token is in neither the server's environment nor its command line";
      }
    ];
    verifyHost "module-models" pinned [
      "sglang-eagle3.service"
      "sglang-eagle3-models.service"
    ];

  # The cluster example: the router in front of both GPU hosts, every host's assertions
  # hold, the units verify; broken router configurations fail with their messages.
  module-cluster =
    let
      router = cluster.router.config.systemd.services.sglang-router;
      workers = cluster.router.config.services.sglang-router.workers;
      verify =
        pkgs.runCommand "sglang-eagle3-module-cluster"
          {
            nativeBuildInputs = [ pkgs.systemd ];
            units = [
              "${unit cluster.router "sglang-router.service"}/sglang-router.service"
              "${unit cluster.gpu-1 "sglang-eagle3.service"}/sglang-eagle3.service"
            ];
          }
          ''
            bash ${./scripts/verify-units.sh} $units | tee $out
          '';
    in
    assert expect "module-cluster" (
      lib.mapAttrsToList (_: noFailedAssertions) cluster
      ++ [
        {
          ok = workers == [
            "http://10.0.0.11:30000"
            "http://10.0.0.12:30000"
          ];
          what = "the router's workers are the GPU hosts: ${builtins.toJSON workers}";
        }
        {
          ok = router.serviceConfig.LoadCredential == [ "api-key:/run/secrets/sglang-api-key" ] && !(lib.hasInfix "--api-key " router.serviceConfig.ExecStart);
          what = "the router's key is a credential, not an argument";
        }
        {
          ok = cluster.router.config.networking.firewall.allowedTCPPorts == [ 30000 ];
          what = "the router host opens its serving port";
        }
      ]
      ++ lib.mapAttrsToList (expected: host: {
        ok = lib.any (lib.hasInfix expected) (failedAssertions host);
        what = "a router where '${expected}' is wrong fails with that message; got ${builtins.toJSON (failedAssertions host)}";
      }) brokenRouter
    );
    lib.foldr assertWarn verify (lib.attrValues cluster);

  # Each broken host fails with the expected assertion message.
  module-assertions =
    assert expect "module-assertions" (
      lib.mapAttrsToList (expected: host: {
        ok = lib.any (lib.hasInfix expected) (failedAssertions host);
        what = "a host where '${expected}' is wrong fails with that message; got ${builtins.toJSON (failedAssertions host)}";
      }) broken
    );
    pkgs.runCommand "sglang-eagle3-module-assertions" { } "touch $out";
}
# Another stack's package through services.sglang-eagle3.package: the 8-GPU host's server
# unit runs that package's sglang-eagle3. Decided at evaluation time; the check's build does
# not build the package (the whole CUDA stack), only the host's assertions are forced.
// lib.mapAttrs' (
  name: stackPackage:
  let
    host = evalHost [
      ../modules/examples/8-gpu-host.nix
      { services.sglang-eagle3.package = lib.mkForce stackPackage; }
    ];
    service = host.config.systemd.services.sglang-eagle3;
    exe = builtins.unsafeDiscardStringContext (lib.getExe stackPackage);
  in
  lib.nameValuePair "module-package-${name}" (
    assert expect "module-package-${name}" [
      (noFailedAssertions host)
      {
        ok = lib.hasPrefix "${exe} serve --config " (builtins.unsafeDiscardStringContext service.serviceConfig.ExecStart);
        what = "the server unit runs ${exe}: ${service.serviceConfig.ExecStart}";
      }
      {
        ok = lib.elem stackPackage host.config.environment.systemPackages;
        what = "the host has the stack's package installed";
      }
    ];
    assertWarn host (pkgs.runCommand "sglang-eagle3-module-package-${name}" { } "touch $out")
  )
) stackPackages
