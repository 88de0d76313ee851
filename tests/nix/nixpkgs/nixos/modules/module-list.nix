# The stand-in's base modules (nixos/modules/module-list.nix has ~2,000; these declare
# what this project touches).
[
  ./base.nix
  ./systemd.nix
  ./users.nix
  ./networking.nix
  ./nix.nix
  ./hardware.nix
  ./monitoring.nix
]
