# services.sglang-eagle3: SGLang 0.5.9 serving Kimi-K2.5 with EAGLE-3, as a hardened
# systemd service. The server is started by `sglang-eagle3 serve`, which runs the
# preflight, starts SGLang and tells systemd when /health_generate answers (Type=notify).
#
# `settings` options are generated from the launcher's own settings schema
# (settings-schema.json, exported from python/src/sglang_eagle3/serving/settings.py), so each
# field is documented once, in Python.
{
  config,
  lib,
  pkgs,
  ...
}:
let
  inherit (lib) mkOption types literalExpression;
  cfg = config.services.sglang-eagle3;

  # Launcher fields that have their own options below (secrets, environment, multi-host):
  # field -> option. The timeouts are plain settings (settings.ready_timeout, settings.stop_timeout),
  # which systemd's start and stop timeouts follow. The option is the one place for the value; the same field
  # in `settings` is refused by an assertion that names the option.
  ownedFields = {
    api_key_file = "apiKeyFile";
    admin_api_key_file = "adminApiKeyFile";
    ssl_keyfile_password_file = "sslKeyfilePasswordFile";
    environment = "environment";
    extra_args = "extraArgs";
    nnodes = "nnodes";
    node_rank = "nodeRank";
    dist_init_addr = "distInitAddr";
  };
  allFields = import ../nix/settings-options.nix { };
  fields = removeAttrs allFields (lib.attrNames ownedFields);
  # Settings SGLang keeps to one node (the schema's multiNodeDefault: FlashInfer's all-reduce
  # fusion, whose workspace is shared over CUDA IPC): their defaults when the model spans hosts.
  # A value given in `settings` still wins; preflight refuses the fusion with nnodes > 1.
  multiNodeDefaults = lib.mapAttrs (_: d: d.multiNodeDefault) (
    lib.filterAttrs (_: d: d ? multiNodeDefault) fields
  );

  typeOf =
    d:
    let
      base =
        if d.kind == "int" then
          (
            if d.min != null && d.max != null then
              types.ints.between d.min d.max
            else if d.min == 1 then
              types.ints.positive
            else if d.min == 0 then
              types.ints.unsigned
            else
              types.int
          )
        else if d.kind == "float" then
          (if d.min != null && d.max != null then types.numbers.between d.min d.max else types.number)
        else if d.kind == "bool" then
          types.bool
        else if d.kind == "enum" then
          types.enum d.values
        else if d.kind == "listOfStr" then
          types.listOf types.str
        else if d.kind == "attrsOfStr" then
          types.attrsOf types.str
        else if d.kind == "nonEmptyStr" then
          types.nonEmptyStr
        else
          types.str;
    in
    if d.nullable then types.nullOr base else base;

  settingOption =
    _name: d:
    mkOption {
      type = typeOf d;
      inherit (d) default;
      description = d.description + lib.optionalString (d.flag != null) " (SGLang `${d.flag}`)";
    };

  settingsFormat = pkgs.formats.json { };
  settingsFile = settingsFormat.generate "sglang-eagle3-settings.json" (import ./settings-file.nix cfg);

  # State and cache directories, the settings file, the supervisor's grace: shared
  # with the image and the Kubernetes manifests (server-process.json).
  process = lib.importJSON ./server-process.json;
  stateDir = process.stateDirectory;
  port = cfg.settings.port;
  rendezvousPort =
    if cfg.distInitAddr == null then null else lib.toInt (lib.last (lib.splitString ":" cfg.distInitAddr));
  exe = lib.getExe cfg.package;
  # Programs the run-time environment takes from the host's NVIDIA driver (nvidia-smi: SGLang
  # runs it at start); a unit's PATH has only coreutils, findutils, grep, sed and systemd.
  # NixOS's nvidia module puts the driver's bin output into the system profile; naming the
  # profile rather than the driver's store path keeps the unit (and the module checks) from
  # depending on the driver build, which builds its kernel module.
  runtimeEnv = lib.importJSON ../nix/runtime-env.json;
  driverPrograms = lib.filterAttrs (_: p: p.from == "driver") runtimeEnv.programs;
  # Where the code writes what it builds or downloads (nix/runtime-env.json "caches"): under
  # ProtectHome and ProtectSystem=strict only the StateDirectory and CacheDirectory are writable.
  cacheEnvironment = import ../nix/cache-environment.nix { inherit lib; };
  driverPath = lib.optional (driverPrograms != { }) "/run/current-system/sw";
  staticUser = cfg.user != null;

  # The sandbox every unit of these modules starts from, and what the server's units relax.
  hardening = import ./hardening.nix;
in
{
  imports = [
    ./sglang-eagle3-monitoring.nix # services.sglang-eagle3.monitoring: Prometheus, alert rules, Grafana
    ./sglang-eagle3-models.nix # services.sglang-eagle3.models: weights pinned by lock files
    ./sglang-router.nix # services.sglang-router: several hosts, each serving a whole replica
    # Once an option of its own; now the setting it set, as stop_timeout is (a host's old value still works,
    # with a warning).
    (lib.mkRenamedOptionModule
      [ "services" "sglang-eagle3" "startTimeoutSec" ]
      [ "services" "sglang-eagle3" "settings" "ready_timeout" ]
    )
  ];

  options.services.sglang-eagle3 = {
    enable = lib.mkEnableOption "the SGLang EAGLE-3 server (Kimi-K2.5 by default)";

    package = mkOption {
      type = types.package;
      description = ''
        The sglang-eagle3 environment (patched SGLang, CUDA 13 torch, the launcher). The flake
        pins two stacks: SGLang 0.5.9, the default, which the flake's `nixosModules.default`
        sets here for the host's system, and SGLang 0.5.23, chosen with
        `services.sglang-eagle3.package = inputs.sglang-eagle3.packages.x86_64-linux.sglang-eagle3-0_5_23;`.
      '';
      example = literalExpression "inputs.sglang-eagle3.packages.x86_64-linux.default";
    };

    settings = mkOption {
      type = types.submodule {
        freeformType = settingsFormat.type;
        options = lib.mapAttrs settingOption fields;
      };
      default = { };
      description = ''
        Server settings, as `sglang-eagle3 settings schema` defines them; the defaults are
        the tuned Kimi-K2.5 NVFP4 + EAGLE-3 configuration. Rendered to a JSON file the
        launcher reads (`--config`). The API key is not a setting: see `apiKeyFile`.
      '';
      example = {
        model_path = "/var/lib/models/Kimi-K2.5-NVFP4";
        speculative_draft_model_path = "/var/lib/models/Kimi-K25-eagle3";
        mem_fraction_static = 0.9;
      };
    };

    gpus = mkOption {
      type = types.nullOr (types.listOf types.ints.unsigned);
      default = null;
      example = [
        0
        1
        2
        3
        4
        5
        6
        7
      ];
      description = "GPU indices the service may use (CUDA_VISIBLE_DEVICES); null means all.";
    };

    environment = mkOption {
      type = types.attrsOf types.str;
      default = { };
      example = {
        NCCL_DEBUG = "WARN";
      };
      description = "Extra environment variables for the server. Not for secrets: they end up in the store.";
    };

    extraArgs = mkOption {
      type = types.listOf types.str;
      default = [ ];
      example = [
        "--log-level"
        "info"
      ];
      description = "More SGLang arguments; checked against SGLang's own flags at start. Not for secrets.";
    };

    apiKeyFile = mkOption {
      type = types.nullOr (types.strMatching "/.+");
      default = null;
      example = "/run/secrets/sglang-api-key";
      description = ''
        File holding the API key, as an absolute path string (so it is never copied into
        the world-readable store). Delivered with systemd's LoadCredential; the launcher
        hands it to SGLang without putting it in argv, the environment or logs.
      '';
    };

    adminApiKeyFile = mkOption {
      type = types.nullOr (types.strMatching "/.+");
      default = null;
      example = "/run/secrets/sglang-admin-api-key";
      description = ''
        File holding SGLang's admin API key (`--admin-api-key`, for its management
        endpoints), handled like `apiKeyFile`: an absolute path string, delivered with
        LoadCredential, never in argv, the environment or logs.
      '';
    };

    sslKeyfilePasswordFile = mkOption {
      type = types.nullOr (types.strMatching "/.+");
      default = null;
      example = "/run/secrets/sglang-tls-key-password";
      description = ''
        File holding the password of an encrypted TLS key (SGLang 0.5.23's
        `--ssl-keyfile-password`; the key and certificate go in `extraArgs` as
        `--ssl-keyfile`/`--ssl-certfile`), handled like `apiKeyFile`: an absolute path
        string, delivered with LoadCredential, never in argv, the environment or logs.
      '';
    };

    openFirewall = mkOption {
      type = types.bool;
      default = false;
      description = "Open `settings.port` in the firewall (set `settings.host` to listen beyond localhost).";
    };

    user = mkOption {
      type = types.nullOr types.str;
      default = null;
      description = "User to run as; null uses a DynamicUser. Created when set.";
    };

    group = mkOption {
      type = types.nullOr types.str;
      default = cfg.user;
      defaultText = literalExpression "config.services.sglang-eagle3.user";
      description = "Group to run as, when `user` is set. Created when set.";
    };

    nnodes = mkOption {
      type = types.ints.positive;
      default = 1;
      description = "Hosts the model spans (tensor parallelism across hosts). Every host runs this service.";
    };

    nodeRank = mkOption {
      type = types.ints.unsigned;
      default = 0;
      description = "This host's rank, 0 .. nnodes - 1; rank 0 serves HTTP.";
    };

    distInitAddr = mkOption {
      type = types.nullOr (types.strMatching ".+:[0-9]+");
      default = null;
      example = "10.0.0.1:50000";
      description = "host:port of rank 0 for the multi-host rendezvous; required when nnodes > 1.";
    };

    openRendezvousFirewall = mkOption {
      type = types.bool;
      default = false;
      description = ''
        Open the rendezvous port of `distInitAddr` in the firewall. NCCL also opens
        data connections on ephemeral ports between the hosts; allow those on the
        private interconnect (e.g. `networking.firewall.trustedInterfaces`).
      '';
    };

    benchmark = {
      enable = lib.mkEnableOption "a throughput benchmark run each time the server becomes ready";
      baselineUrl = mkOption {
        type = types.nullOr types.str;
        default = null;
        example = "http://127.0.0.1:30001";
        description = ''
          A baseline server (no speculation) to compare against with `bench compare`
          (the A/B gate). When null, a single run is recorded.
        '';
      };
      requests = mkOption {
        type = types.ints.positive;
        default = 8;
        description = "Measured requests per run.";
      };
    };

    gpuChecks = {
      enable = lib.mkEnableOption ''
        GPU checks in the Nix sandbox on this host: programs.nix-required-mounts with the
        NVIDIA preset (derivations requiring the "cuda" system feature see the driver and
        /dev/nvidia*), plus the model directories, so the flake's gpu-throughput-check runs here
      '';
      package = mkOption {
        type = types.package;
        readOnly = true;
        default = import ../nix/gpu-check.nix {
          inherit pkgs lib;
          inherit (cfg) package;
          nvidiaDriver = config.hardware.nvidia.package;
          modelPath = cfg.settings.model_path;
          draftModelPath = toString cfg.settings.speculative_draft_model_path;
        };
        defaultText = literalExpression "the throughput A/B gate with this host's driver, package and models";
        description = ''
          The GPU throughput check for this host (build it with `nix build` on the host): the flake's
          gpu-throughput-check with this host's NVIDIA driver (for nvidia-smi), package and models.
        '';
      };
      modelDirs = mkOption {
        type = types.listOf types.str;
        default = lib.filter (lib.hasPrefix "/") [
          cfg.settings.model_path
          (toString cfg.settings.speculative_draft_model_path)
        ];
        defaultText = literalExpression "the local model and draft directories of settings";
        description = "Directories exposed to GPU check sandboxes.";
      };
    };
  };

  config = lib.mkIf cfg.enable (
    lib.mkMerge [
      {
        # A field with its own option, given in `settings` too, would be overwritten by that
        # option (nnodes, ready_timeout, ...) or be a second value beside it (environment; the
        # key files, which would also bypass LoadCredential): one value, one place.
        assertions = lib.mapAttrsToList (field: option: {
          assertion = !(cfg.settings ? ${field});
          message = "services.sglang-eagle3.settings.${field}: set services.sglang-eagle3.${option} instead (that option owns this field; settings must not give it a second value).";
        }) ownedFields;
      }

      {
        services.sglang-eagle3.settings = lib.mkIf (cfg.nnodes > 1) (
          lib.mapAttrs (_: lib.mkDefault) multiNodeDefaults
        );
      }

      {
        assertions = [
          {
            assertion = config.hardware.nvidia.enabled;
            message = "services.sglang-eagle3 needs NixOS's NVIDIA driver (nvidia-smi, libcuda): add \"nvidia\" to services.xserver.videoDrivers and set hardware.nvidia.open.";
          }
          {
            assertion = cfg.nnodes == 1 || cfg.distInitAddr != null;
            message = "services.sglang-eagle3: nnodes = ${toString cfg.nnodes} needs distInitAddr (host:port of rank 0).";
          }
          {
            assertion = cfg.nodeRank < cfg.nnodes;
            message = "services.sglang-eagle3: nodeRank ${toString cfg.nodeRank} must be below nnodes (${toString cfg.nnodes}).";
          }
          {
            assertion = lib.mod cfg.settings.tp_size cfg.nnodes == 0;
            message = "services.sglang-eagle3: settings.tp_size ${toString cfg.settings.tp_size} must split evenly over nnodes (${toString cfg.nnodes}).";
          }
          {
            assertion = cfg.gpus == null || lib.length cfg.gpus >= cfg.settings.tp_size / cfg.nnodes;
            message = "services.sglang-eagle3: settings.tp_size ${toString cfg.settings.tp_size} over ${toString cfg.nnodes} node(s) needs ${toString (cfg.settings.tp_size / cfg.nnodes)} GPUs per host, but gpus lists ${toString (lib.length cfg.gpus)}.";
          }
          {
            assertion = !cfg.openRendezvousFirewall || cfg.distInitAddr != null;
            message = "services.sglang-eagle3: openRendezvousFirewall needs distInitAddr.";
          }
          {
            assertion = rendezvousPort == null || rendezvousPort != port;
            message = "services.sglang-eagle3: the rendezvous port of distInitAddr must differ from settings.port.";
          }
        ];

        users = lib.mkIf staticUser {
          users.${cfg.user} = {
            isSystemUser = true;
            inherit (cfg) group;
            home = stateDir;
          };
          groups.${cfg.group} = { };
        };

        systemd.services.sglang-eagle3 = {
          description = "SGLang EAGLE-3 server (${cfg.settings.model_path})";
          wantedBy = [ "multi-user.target" ];
          wants = [ "network-online.target" ];
          after = [ "network-online.target" ];
          path = driverPath;
          # cfg.environment is not here: it is in the settings file (settings-file.nix), which preflight
          # judges and the launcher passes to SGLang.
          environment =
            cacheEnvironment
            // lib.optionalAttrs (cfg.gpus != null) {
              CUDA_VISIBLE_DEVICES = lib.concatMapStringsSep "," toString cfg.gpus;
            };
          serviceConfig =
            hardening.base
            // hardening.cuda
            // hardening.gpu
            // lib.optionalAttrs staticUser {
              User = cfg.user;
              Group = cfg.group;
            }
            // {
              # The launcher sends READY=1 once /health_generate answers, STOPPING=1 on stop.
              Type = "notify";
              NotifyAccess = "main";
              ExecStart = "${exe} serve --config ${settingsFile}";
              DynamicUser = !staticUser;
              StateDirectory = lib.removePrefix "/var/lib/" stateDir;
              CacheDirectory = lib.removePrefix "/var/cache/" process.cacheDirectory;
              WorkingDirectory = stateDir;
              LoadCredential =
                lib.optional (cfg.apiKeyFile != null) "api-key:${cfg.apiKeyFile}"
                ++ lib.optional (cfg.adminApiKeyFile != null) "admin-api-key:${cfg.adminApiKeyFile}"
                ++ lib.optional (
                  cfg.sslKeyfilePasswordFile != null
                ) "ssl-keyfile-password:${cfg.sslKeyfilePasswordFile}";
              # The launcher waits settings.ready_timeout seconds for /health_generate; systemd that
              # long and two minutes more.
              TimeoutStartSec = builtins.ceil cfg.settings.ready_timeout + process.startGraceSec;
              # SIGTERM to the launcher, which forwards it, gives SGLang settings.stop_timeout
              # seconds, then SIGKILLs its process group; systemd waits that long and 30 s more.
              KillMode = "mixed";
              TimeoutStopSec = builtins.ceil cfg.settings.stop_timeout + process.stopGraceSec;
              Restart = "on-failure";
              RestartSec = "30s";
              RestartSteps = 5;
              RestartMaxDelaySec = "10min";
            };
        };

        networking.firewall.allowedTCPPorts =
          lib.optional cfg.openFirewall port
          ++ lib.optional (cfg.openRendezvousFirewall && rendezvousPort != null) rendezvousPort;

        environment.systemPackages = [ cfg.package ];
      }

      (lib.mkIf cfg.benchmark.enable {
        assertions = [
          {
            assertion = cfg.nodeRank == 0;
            message = "services.sglang-eagle3.benchmark runs on rank 0, which serves HTTP.";
          }
        ];
        systemd.services.sglang-eagle3-bench = {
          description = "Throughput benchmark of the SGLang EAGLE-3 server";
          # After the notify unit is ready, i.e. after /health_generate answered.
          after = [ "sglang-eagle3.service" ];
          requires = [ "sglang-eagle3.service" ];
          wantedBy = [ "sglang-eagle3.service" ];
          environment.HOME = "/var/lib/sglang-eagle3-bench";
          script =
            let
              url = "http://127.0.0.1:${toString port}";
              run = "${exe} bench run --requests ${toString cfg.benchmark.requests} --no-plot";
            in
            ''
              stamp=$(date +%Y%m%d-%H%M%S)
              ${run} --url ${url} --label eagle3 --output "$STATE_DIRECTORY/eagle3-$stamp.jsonl"
            ''
            + lib.optionalString (cfg.benchmark.baselineUrl != null) ''
              ${run} --url ${cfg.benchmark.baselineUrl} --label baseline --output "$STATE_DIRECTORY/baseline-$stamp.jsonl"
              ${exe} bench compare "$STATE_DIRECTORY/baseline-$stamp.jsonl" "$STATE_DIRECTORY/eagle3-$stamp.jsonl" \
                | tee "$STATE_DIRECTORY/verdict-$stamp.txt"
            '';
          serviceConfig =
            hardening.base
            // hardening.cuda
            // {
              Type = "oneshot";
              DynamicUser = true;
              StateDirectory = "sglang-eagle3-bench";
              # The server's key, for `bench` ($CREDENTIALS_DIRECTORY/api-key, sent as a Bearer token).
              LoadCredential = lib.optional (cfg.apiKeyFile != null) "api-key:${cfg.apiKeyFile}";
            };
        };
      })

      (lib.mkIf cfg.gpuChecks.enable {
        programs.nix-required-mounts = {
          enable = true;
          presets.nvidia-gpu.enable = true;
          allowedPatterns.sglang-eagle3-models = {
            onFeatures = [ "cuda" ];
            paths = cfg.gpuChecks.modelDirs;
          };
        };
      })
    ]
  );
}
