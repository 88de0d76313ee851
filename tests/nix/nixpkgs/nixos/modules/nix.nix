# nix.settings and programs.nix-required-mounts, mirrored from
#   nixos/modules/config/nix.nix: system-features defaults to [ nixos-test benchmark
#     big-parallel kvm ] (no gccarch on plain x86_64-linux) and the module ALSO defines them
#     at normal priority (nixpkgs PR #383052), so another normal-priority definition is
#     added to them, while mkDefault would be discarded and mkForce replaces them;
#   nixos/modules/programs/nix-required-mounts.nix: the options, and the NVIDIA preset,
#     which sets nix.settings.system-features to its features at normal priority and needs
#     hardware.graphics.package (defined only when hardware.graphics.enable).
{
  config,
  lib,
  pkgs,
  ...
}:
let
  inherit (lib) mkOption types;
  defaultSystemFeatures = [
    "nixos-test"
    "benchmark"
    "big-parallel"
    "kvm"
  ];
  # nix.nix's semanticConfType: what nix.conf can hold.
  confAtom =
    types.nullOr (
      types.oneOf [
        types.bool
        types.int
        types.float
        types.str
        types.path
        types.package
      ]
    )
    // {
      description = "Nix config atom (null, bool, int, float, str, path or package)";
    };
  semanticConfType = types.attrsOf (types.either confAtom (types.listOf confAtom));
  cfg = config.programs.nix-required-mounts;
  Mount = types.submodule {
    options = {
      host = mkOption { type = types.str; };
      guest = mkOption { type = types.str; };
    };
  };
  Pattern = types.submodule (
    { name, ... }:
    {
      options = {
        onFeatures = mkOption {
          type = types.listOf types.str;
          default = [ name ];
        };
        paths = mkOption {
          type = types.listOf (
            types.oneOf [
              types.path
              Mount
            ]
          );
        };
        unsafeFollowSymlinks = lib.mkEnableOption "symlinks in paths";
      };
    }
  );
  nvidiaGpuDefaults = {
    onFeatures = [
      "gpu"
      "nvidia-gpu"
      "opengl"
      "cuda"
    ];
    paths = [
      pkgs.addDriverRunpath.driverLink
      "/dev/dri"
      "/dev/nvidia*"
      pkgs.addDriverRunpath.driverLink
      config.hardware.graphics.package
    ]
    ++ config.hardware.graphics.extraPackages;
  };
in
{
  options = {
    nix.enable = mkOption {
      type = types.bool;
      default = true;
    };
    nix.settings = mkOption {
      type = types.submodule {
        freeformType = semanticConfType;
        options.system-features = mkOption {
          type = types.listOf types.str;
          default = defaultSystemFeatures;
        };
      };
      default = { };
    };

    programs.nix-required-mounts = {
      enable = lib.mkEnableOption "Expose extra paths to the sandbox depending on derivations' requiredSystemFeatures";
      presets.nvidia-gpu.enable = lib.mkEnableOption "Declare the support for derivations that require an Nvidia GPU to be available, e.g. derivations with `requiredSystemFeatures = [ \"cuda\" ]`";
      allowedPatterns = mkOption {
        type = types.attrsOf Pattern;
        default = { };
      };
      extraWrapperArgs = mkOption {
        type = types.listOf types.str;
        default = [ ];
      };
      package = mkOption {
        type = types.package;
        internal = true;
        default = pkgs.nix-required-mounts;
      };
    };
  };

  config = lib.mkMerge [
    (lib.mkIf config.nix.enable { nix.settings.system-features = defaultSystemFeatures; })
    (lib.mkIf cfg.enable (
      lib.mkMerge [
        { nix.settings.pre-build-hook = lib.getExe cfg.package; }
        (lib.mkIf cfg.presets.nvidia-gpu.enable {
          nix.settings.system-features = cfg.allowedPatterns.nvidia-gpu.onFeatures;
          programs.nix-required-mounts.allowedPatterns.nvidia-gpu = nvidiaGpuDefaults;
        })
      ]
    ))
  ];
}
