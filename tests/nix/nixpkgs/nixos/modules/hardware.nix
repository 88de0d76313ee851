# The GPU host options, mirrored from
#   nixos/modules/hardware/graphics.nix: enable, package (no default unless enabled),
#     extraPackages;
#   nixos/modules/hardware/video/nvidia.nix: the module is on when "nvidia" is in
#     services.xserver.videoDrivers; `open` must be set for drivers >= 560; `package`
#     defaults to boot.kernelPackages.nvidiaPackages.stable; the driver's `bin` output
#     (nvidia-smi) goes into environment.systemPackages;
#   nixos/modules/services/x11/xserver.nix: services.xserver.videoDrivers.
{
  config,
  lib,
  pkgs,
  ...
}:
let
  inherit (lib) mkOption types;
  nvidiaEnabled = lib.elem "nvidia" config.services.xserver.videoDrivers;
  nvidia = config.hardware.nvidia;
in
{
  options = {
    hardware.graphics = {
      enable = mkOption {
        type = types.bool;
        default = false;
      };
      package = mkOption {
        type = types.package;
        internal = true;
      };
      extraPackages = mkOption {
        type = types.listOf types.package;
        default = [ ];
      };
    };
    hardware.nvidia = {
      open = mkOption {
        type = types.nullOr types.bool;
        default = if lib.versionOlder nvidia.package.version "560" then false else null;
      };
      package = mkOption {
        type = types.package;
        default = config.boot.kernelPackages.nvidiaPackages.stable;
      };
      enabled = mkOption {
        readOnly = true;
        type = types.bool;
        default = nvidiaEnabled;
      };
    };
    services.xserver.videoDrivers = mkOption {
      type = types.listOf types.str;
      default = [
        "modesetting"
        "fbdev"
      ];
    };
  };

  config = lib.mkMerge [
    (lib.mkIf config.hardware.graphics.enable { hardware.graphics.package = lib.mkDefault pkgs.mesa; })
    (lib.mkIf nvidiaEnabled {
      hardware.graphics.extraPackages = [ nvidia.package ];
      environment.systemPackages = [ nvidia.package.bin ];
      assertions = [
        {
          assertion = nvidia.open != null;
          message = "You must configure `hardware.nvidia.open` on NVIDIA driver versions >= 560.\nIt is suggested to use the open source kernel modules on Turing or later GPUs (RTX series, GTX 16xx), and the closed source modules otherwise.\n";
        }
      ];
    })
  ];
}
