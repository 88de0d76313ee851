# users.users / users.groups, mirrored from nixos/modules/config/users-groups.nix: the
# options this project sets and the two assertions a system user must pass.
{ config, lib, ... }:
let
  inherit (lib) mkOption types;
in
{
  options.users = {
    users = mkOption {
      type = types.attrsOf (
        types.submodule (
          { name, ... }:
          {
            options = {
              name = mkOption {
                type = types.str;
                default = name;
              };
              isSystemUser = mkOption {
                type = types.bool;
                default = false;
              };
              isNormalUser = mkOption {
                type = types.bool;
                default = false;
              };
              group = mkOption {
                type = types.str;
                default = "";
              };
              home = mkOption {
                type = types.passwdEntry types.path;
                default = "/var/empty";
              };
              uid = mkOption {
                type = types.nullOr types.int;
                default = null;
              };
              extraGroups = mkOption {
                type = types.listOf types.str;
                default = [ ];
              };
            };
          }
        )
      );
      default = { };
    };
    groups = mkOption {
      type = types.attrsOf (
        types.submodule (
          { name, ... }:
          {
            options = {
              name = mkOption {
                type = types.str;
                default = name;
              };
              gid = mkOption {
                type = types.nullOr types.int;
                default = null;
              };
              members = mkOption {
                type = types.listOf types.str;
                default = [ ];
              };
            };
          }
        )
      );
      default = { };
    };
  };

  config = {
    users.users.root = {
      uid = 0;
      group = "root";
      home = "/root";
    };
    users.users.nobody = {
      uid = 65534;
      group = "nogroup";
      isSystemUser = true;
    };
    users.groups.root.gid = 0;
    users.groups.nogroup.gid = 65534;
    assertions = lib.concatLists (
      lib.mapAttrsToList (name: user: [
        {
          assertion =
            lib.xor (
              user.isSystemUser || (user.uid != null && user.uid < 1000 && !user.isNormalUser)
            ) user.isNormalUser;
          message = "Exactly one of users.users.${name}.isSystemUser and users.users.${name}.isNormalUser must be set.\n";
        }
        {
          assertion = user.group != "";
          message = "users.users.${name}.group is unset. This used to default to\nnogroup, but this is unsafe. For example you can create a group\nfor this user with:\nusers.users.${name}.group = \"${name}\";\nusers.groups.${name} = {};\n";
        }
      ]) config.users.users
    );
  };
}
