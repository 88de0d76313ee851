# Stand-in for pkgs.testers.runNixOSTest (pkgs/build-support/testers/default.nix and
# nixos/lib/testing/*.nix): the argument is a test module (an attribute set, a function
# of { config, lib, hostPkgs, nodes, ... }, or a path) with `name`, `nodes.<n>` (NixOS
# modules, evaluated here with this stand-in's NixOS, the host's pkgs read-only),
# `defaults`, `testScript` (a string or a function of { nodes, ... }), `meta`, `skipLint`;
# the result is a derivation "vm-test-run-<name>" that requires the nixos-test and kvm
# system features, with `driver`, `nodes` and `config` as the real one has them.
# The VMs are not run here: its build needs QEMU and KVM.
{ lib, pkgs }:
let
  nodeConfig = lib.types.deferredModule;
  testOptions =
    { config, ... }:
    let
      inherit (lib) mkOption types;
    in
    {
      options = {
        name = mkOption { type = types.str; };
        nodes = mkOption {
          type = types.lazyAttrsOf nodeConfig;
          default = { };
        };
        defaults = mkOption {
          type = types.deferredModule;
          default = { };
        };
        extraBaseModules = mkOption {
          type = types.deferredModule;
          default = { };
        };
        testScript = mkOption {
          type = types.either types.str (types.functionTo types.str);
        };
        meta = mkOption {
          type = types.attrsOf types.anything;
          default = { };
        };
        skipLint = mkOption {
          type = types.bool;
          default = false;
        };
        skipTypeCheck = mkOption {
          type = types.bool;
          default = false;
        };
        globalTimeout = mkOption {
          type = types.ints.positive;
          default = 3600;
        };
        passthru = mkOption {
          type = types.lazyAttrsOf types.raw;
          default = { };
        };
        hostPkgs = mkOption { type = types.raw; };
        evaluatedNodes = mkOption {
          internal = true;
          type = types.lazyAttrsOf types.raw;
        };
        test = mkOption {
          internal = true;
          type = types.raw;
        };
      };
      config = {
        _module.args.nodes = lib.mapAttrs (_: n: n.config) config.evaluatedNodes;
        evaluatedNodes = lib.mapAttrs (
          name: node:
          import ../nixos/eval-config.nix {
            inherit lib;
            modules = [
              node
              config.defaults
              config.extraBaseModules
              {
                # In the stand-in's tree: NixOS's own, not a use the options tracer counts.
                _file = "${toString ./testers.nix}: runNixOSTest node ${name}";
                networking.hostName = lib.mkDefault name;
                # The flake's uses traced (../trace.nix) when tests/test_nixpkgs_standin.py asks.
                nixpkgs.pkgs =
                  if builtins.pathExists ../trace-uses then (import ../trace.nix { inherit lib; }).wrapPackages pkgs else pkgs;
                # nixos/modules/virtualisation/qemu-vm.nix provides these in a real test.
                fileSystems."/" = lib.mkDefault {
                  device = "/dev/vda";
                  fsType = "ext4";
                };
                boot.loader.grub.device = lib.mkDefault "nodev";
                system.stateVersion = lib.mkDefault lib.trivial.release;
              }
            ];
          }
        ) config.nodes;
        test =
          let
            script =
              if builtins.isFunction config.testScript then
                config.testScript { nodes = lib.mapAttrs (_: n: n.config) config.evaluatedNodes; }
              else
                config.testScript;
            driver = pkgs.writeShellScriptBin "nixos-test-driver" ''
              echo "nixpkgs stand-in: the NixOS test driver needs QEMU/KVM and nixpkgs" >&2
              exit 1
            '';
            toplevels = lib.mapAttrs (_: n: (n.__nixosConfigUntraced or n.config).system.build.toplevel) config.evaluatedNodes;
          in
          pkgs.stdenv.mkDerivation {
            name = "vm-test-run-${config.name}";
            requiredSystemFeatures = [
              "nixos-test"
              "kvm"
            ];
            testScript = script;
            nodes = lib.attrValues toplevels;
            buildCommand = ''
              ${driver}/bin/nixos-test-driver -o $out
            '';
            passthru = config.passthru // {
              inherit driver;
              nodes = config.evaluatedNodes;
              inherit config;
            };
            inherit (config) meta;
          };
      };
    };
in
{
  runNixOSTest =
    testModule:
    (lib.evalModules {
      class = "nixosTest";
      modules = [
        testOptions
        {
          hostPkgs = pkgs;
        }
        (lib.setDefaultModuleLocation "the argument that was passed to pkgs.runNixOSTest" testModule)
      ];
      specialArgs = { };
    }).config.test;
}
