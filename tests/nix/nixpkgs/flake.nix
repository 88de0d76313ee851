# A stand-in for github:NixOS/nixpkgs, for evaluating this project's flake without nixpkgs
# (see default.nix). Mirrors the real flake.nix: `lib` is nixpkgs' lib extended with
# `nixosSystem`, `legacyPackages.<system>` is `import ./. { inherit system; }`.
{
  description = "nixpkgs stand-in (evaluation and small host-tool builds only)";

  outputs =
    { self }:
    let
      lib = (import ./lib).extend (
        final: _prev: {
          nixosSystem = args: import ./nixos/eval-config.nix ({ lib = final; } // args);
        }
      );
    in
    {
      inherit lib;
      legacyPackages = lib.genAttrs [ "x86_64-linux" "aarch64-linux" ] (system: import ./. { inherit system; });
    };
}
