# Stand-in for nixos/lib/eval-config.nix, as lib.nixosSystem calls it (flake.nix: `system`
# defaults to null, `lib` is the extended lib). The real module system (lib.evalModules,
# class "nixos", `modulesPath` as a special argument) over base modules that declare the
# NixOS options this project's modules and checks touch, with the real types, defaults and
# the assertions every NixOS host must pass (./modules/*.nix, each naming its original).
# The result has the real shape: config, options, pkgs, extendModules, and
# config.system.build.toplevel, which fails with every failed assertion when forced.
{
  lib,
  system ? null,
  pkgs ? null,
  modules,
  specialArgs ? { },
  baseModules ? import ./modules/module-list.nix,
  extraModules ? [ ],
  prefix ? [ ],
  ...
}:
let
  pkgsModule = {
    _file = ./eval-config.nix;
    key = ./eval-config.nix;
    config = lib.mkMerge (
      lib.optional (system != null) { nixpkgs.system = lib.mkDefault system; }
      ++ lib.optional (pkgs != null) { nixpkgs.pkgs = pkgs; }
    );
  };
  # tests/test_nixpkgs_standin.py traces the flake's uses of the package set (../trace.nix):
  # these base modules stand for NixOS's own and see it untraced.
  tracing = builtins.pathExists ../trace-uses;
  baseModules' = if tracing then map (import ../trace.nix { inherit lib; }).untracedModule baseModules else baseModules;
  evaluated = lib.evalModules {
    inherit prefix;
    class = "nixos";
    specialArgs = {
      modulesPath = toString ./modules;
    }
    // specialArgs;
    modules = baseModules' ++ [ pkgsModule ] ++ extraModules ++ modules;
  };
  withExtraAttrs =
    c:
    c
    // {
      inherit (c._module.args) pkgs;
      inherit lib;
      extendModules = args: withExtraAttrs (c.extendModules args);
    };
in
withExtraAttrs evaluated
