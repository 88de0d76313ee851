# services.sglang-eagle3.monitoring: the server (and the router) in this host's Prometheus,
# the alert rules with their thresholds, and the Grafana dashboard. It only adds to
# services.prometheus / services.grafana when those are enabled on the same host. With
# processState (the default) it also runs node_exporter's systemd collector and scrapes the
# server's unit state from it, so that the alerts tell a server that loads from one that is down.
{
  config,
  options,
  lib,
  pkgs,
  ...
}:
let
  inherit (lib) mkOption types;
  server = config.services.sglang-eagle3;
  cfg = server.monitoring;
  thresholds = import ./monitoring/thresholds.nix;

  # The server is scraped where it listens; a wildcard address is reached on loopback.
  listen = server.settings.host;
  host = if builtins.elem listen [ "0.0.0.0" "::" "" ] then "127.0.0.1" else listen;
  serverTarget = "${host}:${toString server.settings.port}";

  # The router's module (modules/sglang-router.nix); use it only when it exists and is on.
  routerEnabled = options ? services.sglang-router && (config.services.sglang-router.enable or false);
  routerMetrics = config.services.sglang-router.metrics;
  routerMetricsHost = if builtins.elem routerMetrics.host [ "0.0.0.0" "::" "" ] then "127.0.0.1" else routerMetrics.host;

  job = name: targets: extra: {
    job_name = name;
    scrape_interval = cfg.scrapeInterval;
    static_configs = [ { inherit targets; } ];
  }
  // extra;

  # node_exporter: its systemd collector reports the unit's state (activating while the server
  # loads: Type=notify) and its restarts; scraped on loopback where it listens on every address.
  node = config.services.prometheus.exporters.node;
  nodeHost = if builtins.elem node.listenAddress [ "0.0.0.0" "::" "" ] then "127.0.0.1" else node.listenAddress;

  thresholdRules = pkgs.writeText "sglang-eagle3-thresholds.yml" (
    builtins.toJSON (thresholds.rules cfg.thresholds)
  );

  thresholdOption =
    name: description:
    mkOption {
      type = types.number;
      default = thresholds.defaults.${name};
      inherit description;
    };
in
{
  options.services.sglang-eagle3.monitoring = {
    enable = mkOption {
      type = types.bool;
      default = true;
      description = ''
        Scrape the server with this host's Prometheus and load the alert rules (when
        `services.prometheus.enable`), and provision the dashboard (when `services.grafana.enable`).
      '';
    };

    scrapeInterval = mkOption {
      type = types.str;
      default = "15s";
      description = "How often Prometheus scrapes the server, its /health_generate and the router.";
    };

    baselineTargets = mkOption {
      type = types.listOf types.str;
      default = [ ];
      example = [ "gpu-host:30001" ];
      description = ''
        host:port of baseline servers (same model, no speculation), scraped as job
        `sglang-baseline` for the dashboard's EAGLE-3-against-baseline panels.
      '';
    };

    processState = mkOption {
      type = types.bool;
      default = true;
      description = ''
        Enable node_exporter's systemd collector (`services.prometheus.exporters.node`, with its
        restart counts) and scrape the server unit's state from it as job `sglang-eagle3-node`,
        labelled with the server's instance. The alerts read it to tell a server that is loading
        (up to 2 hours, while its /metrics does not answer) from one that is down; without it,
        SGLangServerDown fires during every load and SGLangServerStateUnknown says why.
      '';
    };

    routerTargets = mkOption {
      type = types.listOf types.str;
      default = lib.optional routerEnabled "${routerMetricsHost}:${toString routerMetrics.port}";
      defaultText = lib.literalExpression "the local router's metrics port, when services.sglang-router is enabled";
      description = "host:port of sglang-router metrics endpoints, scraped as job `sglang-router`.";
    };

    thresholds = {
      draftAcceptLength = thresholdOption "draftAcceptLength" ''
        Accept length (tokens per verify step) the draft reaches on your traffic; put the
        `accept len` of `sglang-eagle3 bench run` here. Default: published for a Kimi-K2.5
        EAGLE-3 draft at steps 3 / top-k 1 / draft tokens 4 (MT-Bench).
      '';
      acceptLengthMargin = thresholdOption "acceptLengthMargin" "EagleAcceptLengthLow fires below draftAcceptLength times this, for 15 minutes.";
      baselineDecodeTokS = thresholdOption "baselineDecodeTokS" "Single-stream decode tok/s without speculation (default: the users' 92.6 on 8x RTX PRO 6000).";
      decodeFloorMargin = thresholdOption "decodeFloorMargin" "DecodeThroughputBelowFloor fires below baselineDecodeTokS times this, for 15 minutes.";
      decodeFloorMaxRunning = thresholdOption "decodeFloorMaxRunning" "The decode floor applies while at most this many requests run (the baseline is single-stream).";
      kvCacheUsageMax = thresholdOption "kvCacheUsageMax" "KVCacheNearlyFull fires above this fraction of the KV cache, for 10 minutes.";
      queueMin = thresholdOption "queueMin" "QueueGrowingThroughputFlat needs at least this many queued requests.";
    };
  };

  config = lib.mkIf (server.enable && cfg.enable) (
    lib.mkMerge [
      (lib.mkIf config.services.prometheus.enable {
        services.prometheus = {
          scrapeConfigs = [
            (job "sglang-eagle3" [ serverTarget ] { })
            # /health_generate as a scrape target: `up` is 0 while it fails. It answers with an
            # empty body and no Content-Type, which Prometheus 3 accepts only with a fallback.
            (job "sglang-eagle3-health" [ serverTarget ] {
              metrics_path = "/health_generate";
              fallback_scrape_protocol = "PrometheusText0.0.4";
            })
          ]
          ++ lib.optional cfg.processState {
            job_name = "sglang-eagle3-node";
            scrape_interval = cfg.scrapeInterval;
            # the server's instance, so the alerts join the unit's state to its /metrics target
            static_configs = [
              {
                targets = [ "${nodeHost}:${toString node.port}" ];
                labels.instance = serverTarget;
              }
            ];
            # the server unit's series only (the host's own node job, if any, has the rest)
            metric_relabel_configs = [
              {
                source_labels = [ "__name__" ];
                regex = "node_systemd_unit_state|node_systemd_service_restart_total";
                action = "keep";
              }
              {
                source_labels = [ "name" ];
                regex = "sglang-eagle3\\.service";
                action = "keep";
              }
            ];
          }
          ++ lib.optional (cfg.baselineTargets != [ ]) (job "sglang-baseline" cfg.baselineTargets { })
          ++ lib.optional (cfg.routerTargets != [ ]) (job "sglang-router" cfg.routerTargets { });
          # nixpkgs checks both with `promtool check rules` when it builds the configuration.
          ruleFiles = [
            ./monitoring/sglang-eagle3-alerts.yml
            thresholdRules
          ];
          exporters.node = lib.mkIf cfg.processState {
            enable = true;
            enabledCollectors = [ "systemd" ];
            extraFlags = [ "--collector.systemd.enable-restarts-metrics" ];
          };
        };
      })
      (lib.mkIf config.services.grafana.enable {
        services.grafana.provision = {
          enable = true;
          dashboards.settings.providers = [
            {
              name = "sglang-eagle3";
              options.path = ./monitoring/sglang-eagle3-dashboard.json;
            }
          ];
        };
      })
    ]
  );
}
