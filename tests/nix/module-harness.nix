# Evaluate modules/sglang-eagle3.nix with nixpkgs' lib.evalModules and minimal
# declarations of the NixOS options it touches, without the rest of nixpkgs.
# Used by tests/test_nix.py when NIXPKGS_LIB points to a copy of nixpkgs' lib/.
{
  libPath,
  config,
  module ? ../../modules/sglang-eagle3.nix,
}:
let
  lib = import libPath;
  inherit (lib) mkOption types;
  anything = mkOption {
    type = types.attrsOf types.anything;
    default = { };
  };
  # The few pkgs attributes the module uses.
  pkgs = {
    formats.json = _: {
      type = types.attrsOf types.anything;
      # Evaluation only: the file's content is checked through renderedSettings.
      generate = name: _value: "/nix/store/eval-only-${name}";
    };
    # Evaluation only: keeps the text so the tests can read the rendered file.
    writeText = name: text: { inherit name text; };
  };
  enableOption = mkOption {
    type = types.bool;
    default = false;
  };
  listOption = mkOption {
    type = types.listOf types.anything;
    default = [ ];
  };
  declarations = {
    options = {
      assertions = mkOption {
        type = types.listOf types.attrs;
        default = [ ];
      };
      users = anything;
      systemd.services = mkOption {
        type = types.attrsOf (
          types.submodule {
            freeformType = types.attrsOf types.anything;
            # Lists NixOS concatenates across modules (the models module adds to the server's).
            options = lib.genAttrs [ "after" "before" "wants" "requires" "wantedBy" "requiredBy" ] (
              _:
              mkOption {
                type = types.listOf types.str;
                default = [ ];
              }
            );
          }
        );
        default = { };
      };
      networking.firewall.allowedTCPPorts = mkOption {
        type = types.listOf types.port;
        default = [ ];
      };
      environment.systemPackages = mkOption {
        type = types.listOf types.anything;
        default = [ ];
      };
      programs.nix-required-mounts = anything;
      # Set by the example hosts, not by the module; declared so they evaluate.
      hardware = anything;
      nixpkgs = anything;
      services.xserver = anything;
      # What the monitoring module adds to (nixpkgs' prometheus and grafana modules).
      services.prometheus = {
        enable = enableOption;
        scrapeConfigs = listOption;
        ruleFiles = listOption;
      };
      services.grafana = {
        enable = enableOption;
        provision.enable = enableOption;
        provision.dashboards.settings.providers = listOption;
      };
      networking.firewall.trustedInterfaces = mkOption {
        type = types.listOf types.str;
        default = [ ];
      };
    };
  };
  stubPackage = {
    type = "derivation";
    name = "sglang-eagle3";
    outPath = "/nix/store/sglang-eagle3-stub";
    meta.mainProgram = "sglang-eagle3";
  };
  evaluated = lib.evalModules {
    modules = [
      declarations
      module
      { services.sglang-eagle3.package = stubPackage; }
      config
    ];
    specialArgs = { inherit pkgs; };
  };
  c = evaluated.config;
in
{
  settings = c.services.sglang-eagle3.renderedSettings;
  failedAssertions = map (a: a.message) (lib.filter (a: !a.assertion) c.assertions);
  services = lib.mapAttrs (_: s: removeAttrs s [ "_module" ]) c.systemd.services;
  allowedTCPPorts = c.networking.firewall.allowedTCPPorts;
  requiredMounts = c.programs.nix-required-mounts;
  monitoring = {
    inherit (c.services.prometheus) scrapeConfigs;
    ruleFiles = map (f: if builtins.isAttrs f then f else toString f) c.services.prometheus.ruleFiles;
    grafana = {
      inherit (c.services.grafana.provision) enable;
      providers = map (p: p // { options.path = toString p.options.path; }) c.services.grafana.provision.dashboards.settings.providers;
    };
  };
  options = lib.mapAttrs (_: o: o.description or null) (
    removeAttrs evaluated.options.services.sglang-eagle3 [ "settings" ]
  );
}
