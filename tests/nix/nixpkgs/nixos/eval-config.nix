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
  # these base modules stand for NixOS's own and see it untraced. The other modules' uses of
  # NixOS options are traced (./trace-options.nix, tests/test_nixos_options_standin.py).
  tracing = builtins.pathExists ../trace-uses;
  baseModules' = if tracing then map (import ../trace.nix { inherit lib; }).untracedModule baseModules else baseModules;
  traceOptions = import ./trace-options.nix { inherit lib; };
  given = extraModules ++ modules;
  evaluated = lib.evalModules {
    inherit prefix;
    class = "nixos";
    specialArgs = {
      modulesPath = toString ./modules;
    }
    // specialArgs;
    modules = baseModules' ++ [ pkgsModule ] ++ (if tracing then traceOptions.traceModules given else given);
  };
  withExtraAttrs =
    c:
    c
    // {
      inherit (c._module.args) pkgs;
      inherit lib;
      extendModules = args: withExtraAttrs (c.extendModules args);
    };
  # Reads of the evaluated system's config traced; the harness reads the untraced one.
  traced = evaluated // {
    config = traceOptions.readConfig evaluated.options evaluated.config;
    __nixosConfigUntraced = evaluated.config;
  };
in
withExtraAttrs (if tracing then traced else evaluated)
