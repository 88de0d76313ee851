# The users' host: 8x RTX PRO 6000 Blackwell (SM120, PCIe), Kimi-K2.5 NVFP4 + EAGLE-3.
# Import next to the flake's module:
#   nixosConfigurations.gpu-host = nixpkgs.lib.nixosSystem {
#     system = "x86_64-linux";
#     modules = [ sglang-eagle3.nixosModules.default ./8-gpu-host.nix ./hardware-configuration.nix ];
#   };
{ config, ... }:
{
  nixpkgs.config.allowUnfree = true;
  hardware.nvidia = {
    open = true;
    package = config.boot.kernelPackages.nvidiaPackages.latest;
  };
  services.xserver.videoDrivers = [ "nvidia" ];
  hardware.graphics.enable = true;

  services.sglang-eagle3 = {
    enable = true;
    settings = {
      # Local copies: no download at start-up, and preflight checks they hold config.json.
      model_path = "/var/lib/models/Kimi-K2.5-NVFP4";
      speculative_draft_model_path = "/var/lib/models/Kimi-K25-eagle3";
      host = "0.0.0.0";
      mem_fraction_static = 0.9;
      # The rest are the tuned defaults: tp 8, EAGLE3 3 steps / top-k 1 / 4 draft tokens,
      # FlashInfer attention, torch symm mem and FlashInfer allreduce fusion requested.
    };
    gpus = [ 0 1 2 3 4 5 6 7 ];
    openFirewall = true;
    apiKeyFile = "/run/secrets/sglang-api-key";
    environment.NCCL_DEBUG = "WARN";
    benchmark.enable = true;
    gpuChecks.enable = true;
  };
}
