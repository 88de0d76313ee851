# What every NixOS system has, mirrored from:
#   nixos/modules/misc/nixpkgs.nix            nixpkgs.{hostPlatform,system,config,overlays,pkgs}, _module.args.pkgs
#   nixos/modules/misc/assertions.nix         assertions, warnings
#   nixos/modules/system/activation/top-level.nix  system.build.toplevel checks assertions and warnings
#   nixos/modules/misc/version.nix            system.stateVersion (warns when read while unset)
#   nixos/modules/tasks/filesystems.nix       fileSystems (fsType still defaults to "auto" at 2026-02)
#   nixos/modules/system/boot/stage-1.nix     "The ‘fileSystems’ option does not specify your root file system."
#   nixos/modules/system/boot/loader/grub/grub.nix, .../systemd-boot/systemd-boot.nix  the boot loader assertion
#   nixos/modules/system/boot/kernel.nix      boot.kernelPackages
#   nixos/modules/config/system-path.nix      environment.systemPackages
#   nixos/modules/misc/meta.nix               meta (maintainers, doc)
{
  config,
  options,
  lib,
  pkgs,
  ...
}:
let
  inherit (lib) mkOption types;
  cfg = config.nixpkgs;
  hostPlatform =
    if options.nixpkgs.hostPlatform.isDefined then
      cfg.hostPlatform
    else if options.nixpkgs.system.isDefined then
      lib.systems.elaborate cfg.system
    else
      throw "Neither nixpkgs.hostPlatform nor the legacy option nixpkgs.system has been set. You can set nixpkgs.hostPlatform in hardware-configuration.nix by re-running a recent version of nixos-generate-config.";
  importedPkgs = import ../.. {
    inherit lib;
    system = hostPlatform.system;
    inherit (cfg) config overlays;
  };
  finalPkgs = if options.nixpkgs.pkgs.isDefined then cfg.pkgs else importedPkgs;
  # What this module itself uses: the untraced set when tests/test_nixpkgs_standin.py traces
  # the flake's uses (../../trace.nix), so NixOS's own uses are not counted as the flake's.
  ownPkgs = finalPkgs.__nixpkgsStandInUntraced or finalPkgs;
  failedAssertions = map (a: a.message) (lib.filter (a: !a.assertion) config.assertions);
  # misc/nixpkgs.nix's configType: attribute sets (or functions of { lib, pkgs }) merged with
  # recursiveUpdate, the later definition winning.
  optCall = f: x: if lib.isFunction f then f x else f;
  configType = lib.mkOptionType {
    name = "nixpkgs-config";
    description = "nixpkgs config";
    check = x: builtins.isAttrs x || lib.isFunction x;
    merge =
      _loc:
      lib.foldr (
        def: rhs: lib.recursiveUpdate (optCall def.value { inherit lib pkgs; }) (optCall rhs { inherit lib pkgs; })
      ) { };
  };
  # tasks/filesystems.nix: a string with a check, described as such (not lib.types.nonEmptyStr).
  addCheckDesc =
    desc: elemType: check:
    types.addCheck elemType check // { description = "${elemType.description} (with check: ${desc})"; };
  nonEmptyStr = addCheckDesc "non-empty" types.str (s: builtins.match "[ \t\n]*" s == null);
in
{
  options = {
    nixpkgs = {
      hostPlatform = mkOption {
        type = types.either types.str types.attrs;
        apply = lib.systems.elaborate;
      };
      system = mkOption { type = types.str; };
      config = mkOption {
        type = configType;
        default = { };
      };
      overlays = mkOption {
        type = types.listOf types.anything;
        default = [ ];
      };
      pkgs = mkOption { type = types.attrs; };
    };

    assertions = mkOption {
      type = types.listOf types.unspecified;
      internal = true;
      default = [ ];
    };
    warnings = mkOption {
      type = types.listOf types.str;
      internal = true;
      default = [ ];
    };

    system.build = mkOption {
      type = types.submoduleWith {
        modules = [ { freeformType = types.lazyAttrsOf types.unspecified; } ];
      };
      default = { };
    };
    system.stateVersion = mkOption {
      type = types.str;
      default = lib.trivial.release;
      apply =
        v:
        lib.warnIf (options.system.stateVersion.highestPrio == (lib.mkOptionDefault { }).priority)
          "system.stateVersion is not set, defaulting to ${v}. Read why this matters on https://nixos.org/manual/nixos/stable/options.html#opt-system.stateVersion."
          v;
    };

    fileSystems = mkOption {
      type = types.attrsOf (
        types.submodule (
          { name, ... }:
          {
            options = {
              mountPoint = mkOption {
                type = types.str;
                default = name;
              };
              device = mkOption {
                type = types.nullOr nonEmptyStr;
                default = null;
              };
              # "auto" at the lock; nixpkgs PR #444829 (merged 2026-04-06) removed the default.
              fsType = mkOption {
                type = nonEmptyStr;
                default = "auto";
              };
              options = mkOption {
                type = types.listOf types.str;
                default = [ "defaults" ];
              };
            };
          }
        )
      );
      default = { };
    };

    boot = {
      isContainer = mkOption {
        type = types.bool;
        default = false;
      };
      initrd.enable = mkOption {
        type = types.bool;
        default = !config.boot.isContainer;
      };
      kernelPackages = mkOption {
        type = types.raw;
        default = ownPkgs.linuxPackages;
      };
      loader.grub = {
        enable = mkOption {
          type = types.bool;
          default = !config.boot.isContainer;
        };
        device = mkOption {
          type = types.str;
          default = "";
        };
        devices = mkOption {
          type = types.listOf types.str;
          default = [ ];
        };
      };
      loader.systemd-boot.enable = mkOption {
        type = types.bool;
        default = false;
      };
    };

    environment.systemPackages = mkOption {
      type = types.listOf types.package;
      default = [ ];
    };

    meta = mkOption {
      type = types.submodule {
        freeformType = types.attrsOf types.anything;
        options.maintainers = mkOption {
          type = types.listOf types.raw;
          default = [ ];
        };
      };
      default = { };
    };
  };

  config = {
    _module.args.pkgs = lib.mkOverride lib.modules.defaultOverridePriority finalPkgs;

    boot.loader.grub.devices = lib.mkIf (config.boot.loader.grub.device != "") [ config.boot.loader.grub.device ];
    boot.loader.grub.enable = lib.mkIf config.boot.loader.systemd-boot.enable (lib.mkDefault false);

    assertions =
      lib.optional config.boot.initrd.enable {
        assertion = lib.any (fs: fs.mountPoint == "/") (lib.attrValues config.fileSystems);
        message = "The ‘fileSystems’ option does not specify your root file system.";
      }
      ++ lib.optional config.boot.loader.grub.enable {
        assertion = config.boot.loader.grub.devices != [ ];
        message = "You must set the option ‘boot.loader.grub.devices’ or 'boot.loader.grub.mirroredBoots' to make the system bootable.";
      }
      ++ [
        {
          assertion = options.nixpkgs.pkgs.isDefined -> cfg.config == { };
          message = "Your system configures nixpkgs with an externally created instance. `nixpkgs.config` options should be passed when creating the instance instead.";
        }
      ];

    # top-level.nix: building the system checks assertions (all of them, one "- " line
    # each) and shows the warnings.
    system.build.toplevel =
      let
        checked =
          if failedAssertions != [ ] then
            throw "\nFailed assertions:\n${lib.concatMapStringsSep "\n" (m: "- ${m}") failedAssertions}"
          else
            lib.showWarnings config.warnings true;
      in
      assert checked;
      ownPkgs.runCommand "nixos-system-${config.networking.hostName}-stand-in" {
        units = map (u: u.unit) (lib.attrValues config.systemd.units);
        stateVersion = config.system.stateVersion;
      } "mkdir -p $out; for u in $units; do ln -s $u $out/; done";
  };
}
