# The example GPU host the NixOS module is evaluated in, and what is read back from an evaluated
# host (nixpkgs.lib.nixosSystem's or eval-config.nix's result: config, pkgs). One definition for
# the flake's module checks (nix/module-checks.nix) and the tests' harness
# (tests/nix/module-harness.nix), so the host the tests evaluate is the host the flake checks.
{ lib }:
rec {
  # What every real GPU host has from its hardware configuration; without them NixOS's own
  # assertions (root file system, boot loader) and the module's (the NVIDIA driver) fail
  # whatever else the host says.
  hardware = {
    fileSystems."/" = {
      device = "/dev/disk/by-label/nixos";
      fsType = "ext4";
    };
    boot.loader.grub.device = "nodev";
    system.stateVersion = "25.11";
    services.xserver.videoDrivers = [ "nvidia" ];
    hardware.nvidia.open = true;
  };

  failedAssertions = host: map (a: a.message) (lib.filter (a: !a.assertion) host.config.assertions);

  # The server's settings file content (modules/settings-file.nix, as the module writes it).
  settingsOf = host: import ../modules/settings-file.nix host.config.services.sglang-eagle3;

  # Whether the server's ExecStart reads exactly the file settingsOf renders to.
  readsItsSettings =
    host:
    let
      file = (host.pkgs.formats.json { }).generate "sglang-eagle3-settings.json" (settingsOf host);
    in
    lib.hasInfix (builtins.unsafeDiscardStringContext " --config ${file}") (
      builtins.unsafeDiscardStringContext host.config.systemd.services.sglang-eagle3.serviceConfig.ExecStart
    );
}
