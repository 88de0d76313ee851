# services.sglang-router: the router (smg, the Shepherd Model Gateway, which continues
# SGLang's sglang-router) in front of several hosts that each serve a whole model replica,
# e.g. one Kimi-K2.5 + EAGLE-3 server per 8-GPU host (services.sglang-eagle3). Clients talk
# to the router; it spreads requests over the hosts (cache-aware by default), checks their
# health, retries failed requests on another host and opens a circuit breaker on a failing one.
#
# The unit runs `sglang-eagle3-router`, which reads the API key from a systemd credential:
# smg takes its key only on the command line or through its Python API. That one key is used
# both ways: clients must send it to the router, and the router sends it to every worker.
{
  config,
  lib,
  ...
}:
let
  inherit (lib) mkOption types literalExpression;
  cfg = config.services.sglang-router;

  hardening = import ./hardening.nix;
  cacheDir = "/var/cache/sglang-router";
  num = x: toString x;

  # The router's command line, flag by flag (`smg launch --help` documents each).
  routerArgs =
    [
      "--host"
      cfg.host
      "--port"
      (num cfg.port)
      "--policy"
      cfg.policy
      "--cache-threshold"
      (num cfg.cacheAware.cacheThreshold)
      "--balance-abs-threshold"
      (num cfg.cacheAware.balanceAbsThreshold)
      "--balance-rel-threshold"
      (num cfg.cacheAware.balanceRelThreshold)
      "--prometheus-host"
      cfg.metrics.host
      "--prometheus-port"
      (num cfg.metrics.port)
      "--request-timeout-secs"
      (num cfg.requestTimeoutSec)
      "--shutdown-grace-period-secs"
      (num cfg.shutdownGracePeriodSec)
      "--worker-startup-timeout-secs"
      (num cfg.workerStartupTimeoutSec)
      "--worker-startup-check-interval"
      (num cfg.workerCheckIntervalSec)
      "--load-monitor-interval"
      (num cfg.loadMonitorIntervalSec)
      "--health-check-endpoint"
      cfg.healthCheck.endpoint
      "--health-check-interval-secs"
      (num cfg.healthCheck.intervalSec)
      "--health-check-timeout-secs"
      (num cfg.healthCheck.timeoutSec)
      "--health-failure-threshold"
      (num cfg.healthCheck.failureThreshold)
      "--health-success-threshold"
      (num cfg.healthCheck.successThreshold)
      "--log-level"
      cfg.logLevel
      # Routing needs no tokenizer: never load one (from the hub or elsewhere).
      "--disable-tokenizer-autoload"
    ]
    ++ (
      if cfg.retries.enable then
        [
          "--retry-max-retries"
          (num cfg.retries.maxRetries)
          "--retry-initial-backoff-ms"
          (num cfg.retries.initialBackoffMs)
          "--retry-max-backoff-ms"
          (num cfg.retries.maxBackoffMs)
          "--retry-backoff-multiplier"
          (num cfg.retries.backoffMultiplier)
          "--retry-jitter-factor"
          (num cfg.retries.jitterFactor)
        ]
      else
        [ "--disable-retries" ]
    )
    ++ (
      if cfg.circuitBreaker.enable then
        [
          "--cb-failure-threshold"
          (num cfg.circuitBreaker.failureThreshold)
          "--cb-success-threshold"
          (num cfg.circuitBreaker.successThreshold)
          "--cb-timeout-duration-secs"
          (num cfg.circuitBreaker.timeoutSec)
          "--cb-window-duration-secs"
          (num cfg.circuitBreaker.windowSec)
        ]
      else
        [ "--disable-circuit-breaker" ]
    )
    ++ lib.optionals (cfg.maxConcurrentRequests != null) [
      "--max-concurrent-requests"
      (num cfg.maxConcurrentRequests)
    ]
    ++ cfg.extraArgs
    # Last: --worker-urls takes every argument after it.
    ++ [ "--worker-urls" ]
    ++ cfg.workers;

  trimSlash = url: lib.removeSuffix "/" url;
  duplicates = lib.filter (u: lib.count (v: trimSlash v == trimSlash u) cfg.workers > 1) (
    lib.unique cfg.workers
  );
  atLeastOne = path: value: {
    assertion = value >= 1;
    message = "services.sglang-router.${path} must be at least 1, not ${num value}.";
  };
in
{
  options.services.sglang-router = {
    enable = lib.mkEnableOption "the router (smg) in front of several SGLang servers";

    package = mkOption {
      type = types.package;
      description = ''
        An environment with `sglang-eagle3-router` (this project's launcher of the router,
        which reads the API key from a file) and the `smg` package (1.13.0). It needs neither
        SGLang nor CUDA: the router host has no GPU.
      '';
      example = literalExpression "inputs.sglang-eagle3.packages.x86_64-linux.sglang-router";
    };

    workers = mkOption {
      type = types.listOf (types.strMatching "https?://[^/]+/?");
      default = [ ];
      example = [
        "http://10.0.0.11:30000"
        "http://10.0.0.12:30000"
      ];
      description = ''
        Base URLs of the SGLang servers to route to, one per model replica (e.g. one
        `services.sglang-eagle3` host each). The router adds each one as soon as it answers
        `/health` (see `workerStartupTimeoutSec`), and takes it out and back in as its
        health checks fail and pass.
      '';
    };

    policy = mkOption {
      type = types.enum [
        "cache_aware"
        "round_robin"
        "power_of_two"
        "random"
      ];
      default = "cache_aware";
      description = ''
        How a worker is chosen for each request.

        - `"cache_aware"`: requests that share a long prefix with earlier ones (the same
          conversation, the same system prompt) go to the worker that served those, so its
          prefix cache is reused; new prefixes go to the least loaded worker. Falls back to
          the least loaded worker when the load is uneven (see `cacheAware`).
        - `"round_robin"`: each worker in turn.
        - `"power_of_two"`: two workers at random, the less loaded one wins; the load is
          what the workers report on `/v1/loads` (requests and tokens in flight), polled
          every `loadMonitorIntervalSec`.
        - `"random"`: any healthy worker.
      '';
    };

    cacheAware = {
      cacheThreshold = mkOption {
        type = types.numbers.between 0 1;
        default = 0.3;
        description = "Fraction of a request's text that must match a worker's earlier requests to send it there.";
      };
      balanceAbsThreshold = mkOption {
        type = types.ints.unsigned;
        default = 64;
        description = "Cache-aware routing gives way to least-load when the busiest worker has this many more requests in flight than the least busy ...";
      };
      balanceRelThreshold = mkOption {
        type = types.number;
        default = 1.5;
        description = "... and this many times as many (both must hold). At least 1.";
      };
    };

    host = mkOption {
      type = types.str;
      default = "127.0.0.1";
      example = "0.0.0.0";
      description = "Address the router listens on for clients (IPv4 or IPv6).";
    };

    port = mkOption {
      type = types.port;
      default = 30000;
      description = "Port the router listens on for clients (SGLang's API: /generate, /v1/chat/completions, ...).";
    };

    openFirewall = mkOption {
      type = types.bool;
      default = false;
      description = "Open `port` in the firewall (set `host` to listen beyond localhost).";
    };

    metrics = {
      host = mkOption {
        type = types.str;
        default = "127.0.0.1";
        example = "0.0.0.0";
        description = "Address of the router's Prometheus endpoint (`/metrics`, metrics named `smg_*`).";
      };
      port = mkOption {
        type = types.port;
        default = 29000;
        description = "Port of the router's Prometheus endpoint; must differ from `port`.";
      };
      openFirewall = mkOption {
        type = types.bool;
        default = false;
        description = "Open `metrics.port` in the firewall, for a Prometheus server on another host.";
      };
    };

    apiKeyFile = mkOption {
      type = types.nullOr (types.strMatching "/.+");
      default = null;
      example = "/run/secrets/sglang-api-key";
      description = ''
        File holding the API key, as an absolute path string (so it is never copied into the
        world-readable store). Delivered with systemd's LoadCredential and read by
        `sglang-eagle3-router`; never in argv, the environment or logs.

        smg uses this one key both ways: clients must send `Authorization: Bearer <key>`
        (all but `/health`, `/liveness`, `/readiness`, `/health_generate`, `/v1/models` and
        `/engine_metrics`, which stay open to whoever reaches `port`), and the router sends the
        same header to every worker. So the workers must be started with the
        same key (e.g. the same file as their `services.sglang-eagle3.apiKeyFile`); a worker
        without a key ignores it. Null: no key, anyone who can reach `port` may use it.
      '';
    };

    healthCheck = {
      endpoint = mkOption {
        type = types.strMatching "/.*";
        default = "/health";
        description = "Path the router polls on each worker; SGLang 0.5.9's `/health` also generates one token.";
      };
      intervalSec = mkOption {
        type = types.ints.positive;
        default = 60;
        example = 10;
        description = "Seconds between two health checks of a worker. A worker that fails in between is also taken out by the circuit breaker.";
      };
      timeoutSec = mkOption {
        type = types.ints.positive;
        default = 5;
        description = "Seconds a health check may take.";
      };
      failureThreshold = mkOption {
        type = types.ints.unsigned;
        default = 3;
        description = "Failed checks in a row before a worker is taken out. At least 1.";
      };
      successThreshold = mkOption {
        type = types.ints.unsigned;
        default = 2;
        description = "Passed checks in a row before a worker that was out is used again. At least 1.";
      };
    };

    retries = {
      enable = mkOption {
        type = types.bool;
        default = true;
        description = ''
          Retry a failed request (connection refused or reset, HTTP 408, 429, 500, 502, 503,
          504) on another worker. Only requests whose answer has not started: a stream whose
          first tokens reached the client ends early if its worker dies.
        '';
      };
      maxRetries = mkOption {
        type = types.ints.unsigned;
        default = 5;
        description = "Attempts per request at most. At least 1.";
      };
      initialBackoffMs = mkOption {
        type = types.ints.unsigned;
        default = 50;
        description = "Wait before the first retry, in milliseconds.";
      };
      maxBackoffMs = mkOption {
        type = types.ints.unsigned;
        default = 30000;
        description = "Longest wait between retries, in milliseconds; at least `initialBackoffMs`.";
      };
      backoffMultiplier = mkOption {
        type = types.number;
        default = 1.5;
        description = "Each wait is this many times the one before. At least 1.";
      };
      jitterFactor = mkOption {
        type = types.numbers.between 0 1;
        default = 0.2;
        description = "Random part of each wait (0 to 1), so that retries of many clients do not come at once.";
      };
    };

    circuitBreaker = {
      enable = mkOption {
        type = types.bool;
        default = true;
        description = "Stop sending to a worker after `failureThreshold` failed requests, until `timeoutSec` has passed.";
      };
      failureThreshold = mkOption {
        type = types.ints.unsigned;
        default = 10;
        description = "Failed requests (within `windowSec`) that open the breaker. At least 1.";
      };
      successThreshold = mkOption {
        type = types.ints.unsigned;
        default = 3;
        description = "Successful trial requests that close it again. At least 1.";
      };
      timeoutSec = mkOption {
        type = types.ints.positive;
        default = 60;
        description = "Seconds an open breaker waits before letting trial requests through.";
      };
      windowSec = mkOption {
        type = types.ints.positive;
        default = 120;
        description = "Seconds over which failures are counted.";
      };
    };

    requestTimeoutSec = mkOption {
      type = types.ints.positive;
      default = 1800;
      description = "Seconds a request may take end to end (long generations run for minutes).";
    };

    workerStartupTimeoutSec = mkOption {
      type = types.ints.positive;
      default = 7320;
      description = ''
        How long the router keeps trying to add a worker that does not answer yet when the
        router starts; a worker that is not up by then is not added until the router
        restarts. Kimi-K2.5 takes tens of minutes to load: keep this at least the GPU hosts'
        `services.sglang-eagle3.settings.ready_timeout` (7200 s by default).
      '';
    };

    workerCheckIntervalSec = mkOption {
      type = types.ints.positive;
      default = 30;
      description = "Seconds between the router's attempts to add a worker at start.";
    };

    loadMonitorIntervalSec = mkOption {
      type = types.ints.positive;
      default = 10;
      description = "Seconds between the router's polls of each worker's `/v1/loads` (the load power of two compares).";
    };

    maxConcurrentRequests = mkOption {
      type = types.nullOr types.ints.positive;
      default = null;
      description = "Requests in flight through the router at most (more wait in its queue); null: smg's default, 1024 per CPU core and at least 4096.";
    };

    shutdownGracePeriodSec = mkOption {
      type = types.ints.unsigned;
      default = 180;
      description = "On stop, seconds the router waits for requests in flight to finish.";
    };

    logLevel = mkOption {
      type = types.enum [
        "debug"
        "info"
        "warn"
        "error"
      ];
      default = "info";
      description = "Log level of the router (to the journal).";
    };

    extraArgs = mkOption {
      type = types.listOf types.str;
      default = [ ];
      example = [
        "--queue-size"
        "256"
      ];
      description = "More `smg launch` arguments (checked by its parser at start). Not for secrets.";
    };
  };

  config = lib.mkIf cfg.enable {
    assertions = [
      {
        assertion = cfg.workers != [ ];
        message = "services.sglang-router.workers is empty: list the base URLs of the SGLang servers, e.g. [ \"http://10.0.0.11:30000\" ].";
      }
      {
        assertion = duplicates == [ ];
        message = "services.sglang-router.workers lists ${lib.concatStringsSep ", " duplicates} more than once; each server once.";
      }
      {
        assertion = cfg.metrics.port != cfg.port;
        message = "services.sglang-router.metrics.port (${num cfg.metrics.port}) must differ from services.sglang-router.port.";
      }
      (atLeastOne "healthCheck.failureThreshold" cfg.healthCheck.failureThreshold)
      (atLeastOne "healthCheck.successThreshold" cfg.healthCheck.successThreshold)
      (atLeastOne "circuitBreaker.failureThreshold" cfg.circuitBreaker.failureThreshold)
      (atLeastOne "circuitBreaker.successThreshold" cfg.circuitBreaker.successThreshold)
      (atLeastOne "retries.maxRetries" cfg.retries.maxRetries)
      (atLeastOne "retries.backoffMultiplier" cfg.retries.backoffMultiplier)
      (atLeastOne "cacheAware.balanceRelThreshold" cfg.cacheAware.balanceRelThreshold)
      {
        assertion = cfg.retries.maxBackoffMs >= cfg.retries.initialBackoffMs;
        message = "services.sglang-router.retries.maxBackoffMs (${num cfg.retries.maxBackoffMs}) is below initialBackoffMs (${num cfg.retries.initialBackoffMs}).";
      }
      {
        assertion = cfg.healthCheck.timeoutSec <= cfg.healthCheck.intervalSec;
        message = "services.sglang-router.healthCheck.timeoutSec must not exceed healthCheck.intervalSec.";
      }
      {
        assertion = !lib.any (a: a == "--api-key" || lib.hasPrefix "--api-key=" a) cfg.extraArgs;
        message = "services.sglang-router.extraArgs must not carry the API key (it would be in the store and the process list); use apiKeyFile.";
      }
      {
        assertion = cfg.apiKeyFile == null || !lib.hasPrefix builtins.storeDir cfg.apiKeyFile;
        message = "services.sglang-router.apiKeyFile must not be in the Nix store, which anyone can read.";
      }
    ];

    warnings = lib.optional (cfg.apiKeyFile == null && !(lib.elem cfg.host [ "127.0.0.1" "::1" "localhost" ])) ''
      services.sglang-router listens on ${cfg.host} without an API key: anyone who can reach
      port ${num cfg.port} can use the model. Set services.sglang-router.apiKeyFile.
    '';

    systemd.services.sglang-router = {
      description = "Router (smg) in front of ${num (lib.length cfg.workers)} SGLang server(s)";
      wantedBy = [ "multi-user.target" ];
      wants = [ "network-online.target" ];
      after = [ "network-online.target" ];
      # --disable-tokenizer-autoload: nothing is fetched, so no hub cache; HOME for smg itself.
      environment.HOME = cacheDir;
      # A network proxy with no devices, no GPUs and no JIT: the shared base, tightened.
      serviceConfig =
        hardening.base
        // hardening.router
        // {
          Type = "exec";
          ExecStart = "${lib.getExe' cfg.package "sglang-eagle3-router"} ${lib.escapeShellArgs routerArgs}";
          DynamicUser = true;
          CacheDirectory = "sglang-router";
          WorkingDirectory = cacheDir;
          LoadCredential = lib.optional (cfg.apiKeyFile != null) "api-key:${cfg.apiKeyFile}";
          Restart = "on-failure";
          RestartSec = "5s";
          # SIGTERM: the router stops accepting and lets requests in flight finish.
          TimeoutStopSec = cfg.shutdownGracePeriodSec + 15;
        };
    };

    networking.firewall.allowedTCPPorts =
      lib.optional cfg.openFirewall cfg.port ++ lib.optional cfg.metrics.openFirewall cfg.metrics.port;

    environment.systemPackages = [ cfg.package ];
  };
}
