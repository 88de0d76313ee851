# Everything the flake can evaluate, forced, for tests/test_nixpkgs_standin.py: with the
# tracing stand-in (tests/nix/nixpkgs/trace.nix) this prints every use the flake, nix/ and
# modules/ make of nixpkgs. What `nix flake check` evaluates (every package, check, dev shell,
# app and the formatter), and what it does not: the `lib` functions, the overlay, and a host
# of nixosModules.default with the flake's own package and its GPU check.
{ flake }:
let
  system = "x86_64-linux";
  nixpkgs = flake.inputs.nixpkgs;
  inherit (nixpkgs) lib;
  drvPaths = set: lib.mapAttrsToList (_: d: d.drvPath) set;
  # A host's config as this file reads it: untraced (what the flake reads is traced).
  configOf = host: host.__nixosConfigUntraced or host.config;
  host = lib.nixosSystem {
    inherit system;
    modules = [
      flake.nixosModules.default
      ../../modules/examples/8-gpu-host.nix
      (import ../../nix/gpu-host.nix { inherit lib; }).hardware
      # A static user: the module's users.users/users.groups definitions have names then.
      { services.sglang-eagle3.user = "sglang-eagle3"; }
    ];
  };
  overlaid = import nixpkgs {
    inherit system;
    overlays = [ flake.overlays.default ];
    config = {
      allowUnfree = true;
      cudaSupport = true;
    };
  };
in
drvPaths flake.packages.${system}
++ drvPaths flake.checks.${system}
++ drvPaths flake.devShells.${system}
++ lib.mapAttrsToList (_: app: app.program) flake.apps.${system}
++ [
  flake.formatter.${system}.drvPath
  (flake.lib.fetchModel { lockFile = ../../nix/tests/example-draft.lock.json; }).drvPath
  (flake.lib.mkStack { version = "0.5.23"; }).package.drvPath
  (configOf host).services.sglang-eagle3.package.drvPath
  (configOf host).services.sglang-eagle3.gpuChecks.package.drvPath
  (configOf host).system.build.toplevel.drvPath
]
# The packages of every host the checks and the VM test evaluate (the stand-in's system build
# does not include environment.systemPackages, the real one does).
++ map (p: p.drvPath) (
  (configOf host).environment.systemPackages
  ++ lib.concatMap (node: (configOf node).environment.systemPackages) (
    lib.attrValues flake.packages.${system}.router-vm-test.passthru.nodes
  )
)
++ [
  # The overlay's own attribute, read from the untraced set: it is the flake's, not nixpkgs'.
  (overlaid.__nixpkgsStandInUntraced or overlaid).sglang-eagle3.drvPath
]
