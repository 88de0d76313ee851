# Evaluate this project's NixOS modules (modules/sglang-eagle3.nix, which imports the
# monitoring, models and router modules) in a host, with nixpkgs' real lib and the NixOS
# stand-in of tests/nix/nixpkgs (the same one the flake evaluation uses), and hand the tests
# what they look at: the rendered settings, the failed assertions, the services and their
# unit files as NixOS writes them, firewall ports, required mounts, monitoring, option docs.
#
# The host is the flake's module checks' GPU host (nix/gpu-host.nix: root file system, boot
# loader, the NVIDIA driver); the packages are stubs (evaluation only: the unit files name
# /nix/store/...-stub paths).
# Used by tests/test_nix.py and the module tests that import its helpers.
{
  libPath,
  config,
  module ? ../../modules/sglang-eagle3.nix,
}:
let
  lib = import libPath;
  gpuHost = import ../../nix/gpu-host.nix { inherit lib; };
  stub = name: program: {
    type = "derivation";
    inherit name;
    outPath = "/nix/store/7a7a7a7a7a7a7a7a7a7a7a7a7a7a7a7a-${name}-stub";
    meta.mainProgram = program;
  };
  host = {
    _file = "tests/nix/module-harness.nix";
    services.sglang-eagle3.package = stub "sglang-eagle3" "sglang-eagle3";
    services.sglang-router.package = stub "sglang-router" "sglang-eagle3-router";
  };
  evaluated = import ./nixpkgs/nixos/eval-config.nix {
    inherit lib;
    system = "x86_64-linux";
    modules = [
      module
      gpuHost.hardware
      host
      config
    ];
  };
  c = evaluated.config;
  # A rule file is a path in the repository or a pkgs.writeText derivation: its text.
  ruleFile = f: if lib.isDerivation f then { inherit (f) name text; } else toString f;
in
{
  # The settings file's content (modules/settings-file.nix); the server's ExecStart names
  # exactly the file that content renders to.
  settings =
    if c.services.sglang-eagle3.enable then
      assert gpuHost.readsItsSettings evaluated;
      gpuHost.settingsOf evaluated
    else
      null;
  failedAssertions = gpuHost.failedAssertions evaluated;
  services = lib.mapAttrs (
    _: s:
    {
      inherit (s)
        description
        wantedBy
        requiredBy
        after
        before
        wants
        requires
        environment
        unitConfig
        serviceConfig
        script
        ;
    }
  ) c.systemd.services;
  # The unit files, as NixOS renders them (nixos/lib/systemd-lib.nix, mirrored by the stand-in).
  units = lib.mapAttrs (_: u: u.text) c.systemd.units;
  allowedTCPPorts = c.networking.firewall.allowedTCPPorts;
  requiredMounts = c.programs.nix-required-mounts;
  systemFeatures = c.nix.settings.system-features;
  monitoring = {
    inherit (c.services.prometheus) scrapeConfigs;
    ruleFiles = map ruleFile c.services.prometheus.ruleFiles;
    grafana = {
      inherit (c.services.grafana.provision) enable;
      providers =
        let
          dashboards = c.services.grafana.provision.dashboards.settings;
        in
        if dashboards == null then
          [ ]
        else
          map (p: p // { options.path = toString p.options.path; }) dashboards.providers;
    };
  };
  options = lib.mapAttrs (_: o: o.description or null) (
    removeAttrs evaluated.options.services.sglang-eagle3 [ "settings" ]
  );
  warnings = c.warnings;
  # Every option of services.sglang-router, nested as declared: its description.
  routerOptions = lib.mapAttrsRecursiveCond (o: !lib.isOption o) (_: o: o.description or null) (
    evaluated.options.services.sglang-router
  );
}
