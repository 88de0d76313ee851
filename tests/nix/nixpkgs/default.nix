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
  ...
}:
let
  lib = import ./lib;
  system' = localSystem.system or localSystem;
  evaluatedConfig = import ./pkgs/config.nix { inherit lib config; };
  base = import ./pkgs/all-packages.nix {
    inherit lib;
    system = system';
    config = evaluatedConfig;
  };
in
assert lib.assertMsg (crossSystem == localSystem || crossSystem == null)
  "nixpkgs stand-in: cross compilation is not mirrored";
lib.fix (lib.extends (lib.composeManyExtensions overlays) base)
