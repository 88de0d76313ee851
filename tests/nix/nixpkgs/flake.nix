# A stand-in for github:NixOS/nixpkgs, for evaluating this project's flake without nixpkgs
# (see default.nix). Mirrors the real flake.nix: `lib` is nixpkgs' lib extended with
# `nixosSystem`, `legacyPackages.<system>` is `import ./. { inherit system; }`.
{
  description = "nixpkgs stand-in (evaluation and small host-tool builds only)";

  outputs =
    { self }:
    let
      tracing = builtins.pathExists ./trace-uses;
      lib = (import ./lib).extend (
        final: _prev: {
          nixosSystem =
            let
              nixosSystem = args: import ./nixos/eval-config.nix ({ lib = final; } // args);
            in
            # tests/test_nixpkgs_standin.py: its uses traced (./trace.nix).
            if tracing then (import ./trace.nix { lib = final; }).wrapNixosSystem nixosSystem else nixosSystem;
        }
      );
    in
    {
      inherit lib;
      legacyPackages = lib.genAttrs [ "x86_64-linux" "aarch64-linux" ] (system: import ./. { inherit system; });
    };
}
