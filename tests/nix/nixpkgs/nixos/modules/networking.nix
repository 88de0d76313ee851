# networking.firewall and networking.hostName, mirrored from
# nixos/modules/services/networking/firewall.nix (port lists read back sorted and
# deduplicated: canonicalizePortList) and nixos/modules/tasks/network-interfaces.nix.
{ lib, ... }:
let
  inherit (lib) mkOption types;
  canonicalizePortList = ports: lib.unique (builtins.sort builtins.lessThan ports);
  ports = mkOption {
    type = types.listOf types.port;
    default = [ ];
    apply = canonicalizePortList;
  };
in
{
  options.networking = {
    hostName = mkOption {
      type = types.strMatching "^$|^[[:alnum:]]([[:alnum:]_-]{0,61}[[:alnum:]])?$";
      default = "nixos";
    };
    firewall = {
      enable = mkOption {
        type = types.bool;
        default = true;
      };
      allowedTCPPorts = ports;
      allowedUDPPorts = ports;
      trustedInterfaces = mkOption {
        type = types.listOf types.str;
        default = [ ];
      };
      interfaces = mkOption {
        type = types.attrsOf (
          types.submodule {
            options = {
              allowedTCPPorts = ports;
              allowedUDPPorts = ports;
            };
          }
        );
        default = { };
      };
    };
  };
}
