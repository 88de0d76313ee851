# A stand-in for `import nixpkgs { ... }`, for evaluating this project's flake where there
# is no nixpkgs (no network, no binary cache). `lib` is nixpkgs' real lib (the test copies
# it next to this file); the package set is small and mirrors the argument shapes and the
# behaviour of the real functions the flake, uv2nix and pyproject.nix call. Each file
# names the nixpkgs file it mirrors. Arguments as pkgs/top-level/impure.nix takes them.
{
  system ? builtins.currentSystem,
  localSystem ? {
    inherit system;
  },
  config ? { },
  overlays ? [ ],
  crossSystem ? localSystem,
  # Not an argument of the real nixpkgs: a test harness that uses this stand-in's NixOS
  # without assembling it (tests/nix/module-harness.nix) passes nixpkgs' lib from elsewhere.
  lib ? import ./lib,
  ...
}:
let
  system' = localSystem.system or localSystem;
  evaluatedConfig = import ./pkgs/config.nix { inherit lib config; };
  base = import ./pkgs/all-packages.nix {
    inherit lib;
    system = system';
    config = evaluatedConfig;
  };
in
let
  pkgs = lib.fix (lib.extends (lib.composeManyExtensions overlays) base);
in
assert lib.assertMsg (crossSystem == localSystem || crossSystem == null)
  "nixpkgs stand-in: cross compilation is not mirrored";
# tests/test_nixpkgs_standin.py: every use of the package set traced (./trace.nix).
if builtins.pathExists ./trace-uses then (import ./trace.nix { inherit lib; }).wrapPackages pkgs else pkgs
