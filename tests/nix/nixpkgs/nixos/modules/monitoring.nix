# services.prometheus (with its node exporter) and services.grafana, mirrored from
#   nixos/modules/services/monitoring/prometheus/default.nix: enable, port (9090),
#     listenAddress, globalConfig, scrapeConfigs (scrape_config / static_config
#     submodules, unset fields null and left out of prometheus.yml), rules, ruleFiles; the
#     generated prometheus.yml (JSON is YAML) and the prometheus unit that reads it;
#   nixos/modules/services/monitoring/grafana.nix: enable, settings (freeform, with
#     server.http_port 3000 / http_addr 127.0.0.1, and security.secret_key, which has no
#     default any more at 2026-02), provision.{enable,datasources,dashboards}.settings with
#     the datasourceConfig / dashboardConfig submodules (dashboard providers' options.path
#     is required).
{
  config,
  lib,
  pkgs,
  ...
}:
let
  inherit (lib) mkOption types;
  opt =
    type:
    mkOption {
      type = types.nullOr type;
      default = null;
    };
  staticConfig = types.submodule {
    options = {
      targets = mkOption { type = types.listOf types.str; };
      labels = mkOption {
        type = types.attrsOf types.str;
        default = { };
      };
    };
  };
  # promTypes.relabel_config: every field optional (null: left out of prometheus.yml).
  relabelConfig = types.submodule {
    options = {
      action = opt (
        types.enum [
          "replace"
          "lowercase"
          "uppercase"
          "keep"
          "drop"
          "hashmod"
          "labelmap"
          "labeldrop"
          "labelkeep"
        ]
      );
      modulus = opt types.int;
      regex = opt types.str;
      replacement = opt types.str;
      separator = opt types.str;
      source_labels = opt (types.listOf types.str);
      target_label = opt types.str;
    };
  };
  scrapeConfig = types.submodule {
    options = {
      job_name = mkOption { type = types.str; };
      scrape_interval = opt types.str;
      scrape_timeout = opt types.str;
      scrape_protocols = opt (types.listOf types.str);
      fallback_scrape_protocol = opt types.str;
      metrics_path = opt types.str;
      honor_labels = opt types.bool;
      scheme = opt (
        types.enum [
          "http"
          "https"
        ]
      );
      params = opt (types.attrsOf (types.listOf types.str));
      authorization = opt types.attrs;
      bearer_token_file = opt types.str;
      static_configs = opt (types.listOf staticConfig);
      relabel_configs = opt (types.listOf relabelConfig);
      metric_relabel_configs = opt (types.listOf relabelConfig);
    };
  };
  filterValid = lib.filterAttrsRecursive (_: v: v != null);
  prom = config.services.prometheus;
  promConfig = filterValid {
    global = prom.globalConfig;
    scrape_configs = prom.scrapeConfigs;
    rule_files =
      prom.ruleFiles ++ lib.optional (prom.rules != [ ]) (pkgs.writeText "prometheus.rules" (lib.concatStringsSep "\n" prom.rules));
  };
  prometheusYml = pkgs.writeText "prometheus.yml" (builtins.toJSON promConfig);

  graf = config.services.grafana;
  # grafana.nix's formats: settings are INI, the provisioning files YAML.
  settingsFormatIni = pkgs.formats.ini {
    listToValue = lib.concatMapStringsSep " " (lib.generators.mkValueStringDefault { });
  };
  yamlValue = (pkgs.formats.yaml { }).type;
  datasourceConfig = types.submodule {
    freeformType = yamlValue;
    options = {
      name = mkOption { type = types.str; };
      type = mkOption { type = types.str; };
      access = mkOption {
        type = types.enum [
          "proxy"
          "direct"
        ];
        default = "proxy";
      };
      url = mkOption {
        type = types.str;
        default = "";
      };
      uid = opt types.str;
      isDefault = mkOption {
        type = types.bool;
        default = false;
      };
      jsonData = opt types.attrs;
    };
  };
  dashboardConfig = types.submodule {
    freeformType = yamlValue;
    options = {
      name = mkOption {
        type = types.str;
        default = "default";
      };
      type = mkOption {
        type = types.str;
        default = "file";
      };
      options.path = mkOption { type = types.path; };
    };
  };
  provisionOf =
    listName: itemType:
    mkOption {
      default = { };
      type = types.submodule {
        options = {
          settings = mkOption {
            default = null;
            type = types.nullOr (
              types.submodule {
                options = {
                  apiVersion = mkOption {
                    type = types.int;
                    default = 1;
                  };
                  ${listName} = mkOption {
                    type = types.listOf itemType;
                    default = [ ];
                  };
                };
              }
            );
          };
          path = opt types.path;
        };
      };
    };
in
{
  options.services = {
    prometheus = {
      enable = lib.mkEnableOption "Prometheus monitoring daemon";
      package = mkOption {
        type = types.package;
        default = pkgs.prometheus;
      };
      port = mkOption {
        type = types.port;
        default = 9090;
      };
      listenAddress = mkOption {
        type = types.str;
        default = "0.0.0.0";
      };
      globalConfig = mkOption {
        type = types.attrsOf types.anything;
        default = { };
      };
      scrapeConfigs = mkOption {
        type = types.listOf scrapeConfig;
        default = [ ];
      };
      rules = mkOption {
        type = types.listOf types.str;
        default = [ ];
      };
      ruleFiles = mkOption {
        type = types.listOf types.path;
        default = [ ];
      };
      # nixos/modules/services/monitoring/prometheus/exporters.nix (mkExporterOpts: enable, port, listenAddress
      # "0.0.0.0", extraFlags, openFirewall; commit 01241074) and exporters/node.nix (port 9100, enabledCollectors,
      # disabledCollectors; its unit runs node_exporter --collector.<name> for each, and allows AF_UNIX, for D-Bus,
      # when the systemd collector is on; commit 04c7868c): the node exporter, the one exporter used here.
      exporters.node = {
        enable = lib.mkEnableOption "the prometheus node exporter";
        port = mkOption {
          type = types.port;
          default = 9100;
        };
        listenAddress = mkOption {
          type = types.str;
          default = "0.0.0.0";
        };
        extraFlags = mkOption {
          type = types.listOf types.str;
          default = [ ];
        };
        openFirewall = mkOption {
          type = types.bool;
          default = false;
        };
        enabledCollectors = mkOption {
          type = types.listOf types.str;
          default = [ ];
        };
        disabledCollectors = mkOption {
          type = types.listOf types.str;
          default = [ ];
        };
      };
    };
    grafana = {
      enable = lib.mkEnableOption "grafana";
      settings = mkOption {
        type = types.submodule {
          freeformType = settingsFormatIni.type;
          options = {
            server.http_port = mkOption {
              type = types.port;
              default = 3000;
            };
            server.http_addr = mkOption {
              type = types.str;
              default = "127.0.0.1";
            };
            security.secret_key = mkOption { type = types.str; };
          };
        };
        default = { };
      };
      provision = {
        enable = lib.mkEnableOption "provision";
        datasources = provisionOf "datasources" datasourceConfig;
        dashboards = provisionOf "providers" dashboardConfig;
      };
    };
  };

  config = lib.mkMerge [
    (lib.mkIf prom.enable {
      systemd.services.prometheus = {
        wantedBy = [ "multi-user.target" ];
        after = [ "network.target" ];
        serviceConfig = {
          ExecStart = "${lib.getExe' prom.package "prometheus"} --config.file=${prometheusYml} --web.listen-address=${prom.listenAddress}:${toString prom.port}";
          User = "prometheus";
          Restart = "always";
          StateDirectory = "prometheus2";
        };
      };
      users.users.prometheus = {
        isSystemUser = true;
        group = "prometheus";
      };
      users.groups.prometheus = { };
    })
    (lib.mkIf prom.exporters.node.enable (
      let
        node = prom.exporters.node;
      in
      {
        systemd.services.prometheus-node-exporter = {
          wantedBy = [ "multi-user.target" ];
          after = [ "network.target" ];
          serviceConfig = {
            ExecStart = lib.concatStringsSep " " (
              [ "${pkgs.prometheus-node-exporter}/bin/node_exporter" ]
              ++ map (x: "--collector." + x) node.enabledCollectors
              ++ map (x: "--no-collector." + x) node.disabledCollectors
              ++ [ "--web.listen-address ${node.listenAddress}:${toString node.port}" ]
              ++ node.extraFlags
            );
            RestrictAddressFamilies = [
              "AF_INET"
              "AF_INET6"
            ]
            ++ lib.optional (lib.elem "systemd" node.enabledCollectors || lib.elem "logind" node.enabledCollectors) "AF_UNIX";
          };
        };
      }
    ))
    (lib.mkIf graf.enable {
      systemd.services.grafana = {
        wantedBy = [ "multi-user.target" ];
        after = [ "network.target" ];
        serviceConfig.ExecStart = "${pkgs.grafana}/bin/grafana server --config ${settingsFormatIni.generate "grafana.ini" graf.settings}";
      };
    })
  ];
}
