# systemd services and their unit files, mirrored from
#   nixos/lib/systemd-unit-options.nix   the options of systemd.services.<name> and their types
#   nixos/lib/systemd-lib.nix            unitConfig/serviceConfig modules, makeJobScript, toOption,
#                                        attrsToSection, commonUnitText, serviceToUnit, makeUnit
#   nixos/modules/system/boot/systemd.nix  systemd.units from systemd.services, globalEnvironment,
#                                        the network-online.target warning
#   nixos/modules/config/i18n.nix, config/locale.nix  LOCALE_ARCHIVE and TZDIR for every service
# so `config.systemd.units."<name>.service".unit` is a derivation whose output holds the unit
# file as NixOS writes it (booleans as true/false, lists as repeated lines, After=/Wants=...
# space-joined, Environment="K=V" JSON-quoted and sorted, ExecStart from `script` with a
# trailing space, [Install] WantedBy=).
{
  config,
  lib,
  pkgs,
  ...
}:
let
  inherit (lib)
    mkOption
    types
    optionalAttrs
    optionalString
    concatMapStrings
    ;
  cfg = config.systemd;

  unitNameType = types.strMatching "[a-zA-Z0-9@%:_.\\-]+[.](service|socket|device|mount|automount|swap|target|path|timer|scope|slice)";
  unitOption = types.mkOptionType {
    name = "systemd option";
    merge =
      loc: defs:
      let
        defs' = lib.filterOverrides defs;
      in
      if lib.any (def: lib.isList def.value) defs' then
        lib.concatMap (def: lib.toList def.value) defs'
      else
        lib.mergeEqualOption loc defs';
  };
  checkService =
    sc:
    let
      types' = [
        "exec"
        "simple"
        "forking"
        "oneshot"
        "dbus"
        "notify"
        "notify-reload"
        "idle"
      ];
      restarts = [
        "no"
        "on-success"
        "on-failure"
        "on-abnormal"
        "on-abort"
        "always"
      ];
    in
    (!(sc ? Type) || lib.elem sc.Type types') && (!(sc ? Restart) || lib.elem sc.Restart restarts);

  toOption =
    x:
    if x == true then
      "true"
    else if x == false then
      "false"
    else
      toString x;
  attrsToSection =
    as:
    lib.concatStrings (
      lib.concatLists (
        lib.mapAttrsToList (name: value: map (x: "${name}=${toOption x}\n") (if lib.isList value then value else [ value ])) as
      )
    );
  shellEscape = s: lib.replaceStrings [ "\\" ] [ "\\\\" ] s;
  mkPathSafeName = lib.replaceStrings [ "@" ":" "\\" "[" "]" ] [ "-" "-" "-" "" "" ];

  makeJobScript =
    name: text:
    let
      scriptName = lib.replaceStrings [ "\\" "@" ] [ "-" "_" ] (shellEscape name);
      out = (pkgs.writeShellScriptBin scriptName "set -e\n\n${text}\n").overrideAttrs (_: {
        name = "unit-script-${scriptName}";
      });
    in
    lib.getExe out;

  serviceModule =
    { name, config, ... }:
    let
      listOfUnits = mkOption {
        type = types.listOf unitNameType;
        default = [ ];
      };
    in
    {
      options = {
        enable = mkOption {
          type = types.bool;
          default = true;
        };
        name = mkOption {
          type = types.str;
          default = "${name}.service";
        };
        description = mkOption {
          type = types.singleLineStr;
          default = "";
        };
        documentation = mkOption {
          type = types.listOf types.str;
          default = [ ];
        };
        wantedBy = listOfUnits;
        requiredBy = listOfUnits;
        requires = listOfUnits;
        wants = listOfUnits;
        after = listOfUnits;
        before = listOfUnits;
        bindsTo = listOfUnits;
        partOf = listOfUnits;
        conflicts = listOfUnits;
        onFailure = listOfUnits;
        unitConfig = mkOption {
          type = types.attrsOf unitOption;
          default = { };
        };
        serviceConfig = mkOption {
          type = types.addCheck (types.attrsOf unitOption) checkService;
          default = { };
        };
        environment = mkOption {
          type = types.attrsOf (
            types.nullOr (
              types.oneOf [
                types.str
                types.path
                types.package
              ]
            )
          );
          default = { };
        };
        path = mkOption {
          type = types.listOf (types.oneOf [
            types.package
            types.str
          ]);
          default = [ ];
        };
        script = mkOption {
          type = types.lines;
          default = "";
        };
        scriptArgs = mkOption {
          type = types.str;
          default = "";
        };
        preStart = mkOption {
          type = types.lines;
          default = "";
        };
        postStart = mkOption {
          type = types.lines;
          default = "";
        };
        preStop = mkOption {
          type = types.lines;
          default = "";
        };
        postStop = mkOption {
          type = types.lines;
          default = "";
        };
        restartTriggers = mkOption {
          type = types.listOf types.unspecified;
          default = [ ];
        };
        restartIfChanged = mkOption {
          type = types.bool;
          default = true;
        };
        stopIfChanged = mkOption {
          type = types.bool;
          default = true;
        };
        startLimitBurst = mkOption { type = types.int; };
        startLimitIntervalSec = mkOption { type = types.int; };
      };
      config = {
        unitConfig =
          optionalAttrs (config.requires != [ ]) { Requires = toString config.requires; }
          // optionalAttrs (config.wants != [ ]) { Wants = toString config.wants; }
          // optionalAttrs (config.after != [ ]) { After = toString config.after; }
          // optionalAttrs (config.before != [ ]) { Before = toString config.before; }
          // optionalAttrs (config.bindsTo != [ ]) { BindsTo = toString config.bindsTo; }
          // optionalAttrs (config.partOf != [ ]) { PartOf = toString config.partOf; }
          // optionalAttrs (config.conflicts != [ ]) { Conflicts = toString config.conflicts; }
          // optionalAttrs (config.restartTriggers != [ ]) {
            X-Restart-Triggers = "${pkgs.writeText "X-Restart-Triggers-${name}" (
              toString (map (x: if lib.isPath x then "${x}" else x) (lib.flatten config.restartTriggers))
            )}";
          }
          // optionalAttrs (config.description != "") { Description = config.description; }
          // optionalAttrs (config.documentation != [ ]) { Documentation = toString config.documentation; }
          // optionalAttrs (config.onFailure != [ ]) { OnFailure = toString config.onFailure; };
        # stage2ServiceConfig: every service gets these after its own path entries.
        path = lib.mkAfter (
          with pkgs;
          [
            coreutils
            findutils
            gnugrep
            gnused
            systemd
          ]
        );
        environment.PATH = "${lib.makeBinPath config.path}:${lib.makeSearchPathOutput "bin" "sbin" config.path}";
        serviceConfig = lib.mkMerge [
          (lib.mkIf (config.preStart != "") { ExecStartPre = [ (makeJobScript "${name}-pre-start" config.preStart) ]; })
          (lib.mkIf (config.script != "") {
            ExecStart = makeJobScript "${name}-start" config.script + " " + config.scriptArgs;
          })
          (lib.mkIf (config.postStart != "") {
            ExecStartPost = [ (makeJobScript "${name}-post-start" config.postStart) ];
          })
          (lib.mkIf (config.preStop != "") { ExecStop = makeJobScript "${name}-pre-stop" config.preStop; })
          (lib.mkIf (config.postStop != "") { ExecStopPost = makeJobScript "${name}-post-stop" config.postStop; })
        ];
      };
    };

  serviceToUnit =
    def:
    let
      env = cfg.globalEnvironment // def.environment;
    in
    {
      inherit (def) name wantedBy enable;
      text =
        "[Unit]\n"
        + attrsToSection def.unitConfig
        + "\n"
        + "[Service]\n"
        + concatMapStrings (
          n: optionalString (env.${n} != null) "Environment=${builtins.toJSON "${n}=${env.${n}}"}\n"
        ) (lib.attrNames env)
        + optionalString (!def.restartIfChanged) "X-RestartIfChanged=false\n"
        + optionalString (!def.stopIfChanged) "X-StopIfChanged=false\n"
        + attrsToSection def.serviceConfig
        + optionalString (def.wantedBy != [ ]) "\n[Install]\nWantedBy=${lib.concatStringsSep " " def.wantedBy}\n";
    };

  makeUnit =
    name: unit:
    if unit.enable then
      pkgs.runCommand "unit-${mkPathSafeName name}"
        {
          preferLocalBuild = true;
          allowSubstitutes = false;
          text = unit.text;
          passAsFile = [ "text" ];
        }
        ''
          name=${shellEscape name}
          mkdir -p "$out/$(dirname -- "$name")"
          mv "$textPath" "$out/$name"
        ''
    else
      pkgs.runCommand "unit-${mkPathSafeName name}-disabled" { } ''
        name=${shellEscape name}
        mkdir -p "$out/$(dirname -- "$name")"
        ln -s /dev/null "$out/$name"
      '';
in
{
  options.systemd = {
    services = mkOption {
      type = types.attrsOf (types.submodule serviceModule);
      default = { };
    };
    units = mkOption {
      type = types.attrsOf (
        types.submodule (
          { name, config, ... }:
          {
            options = {
              enable = mkOption {
                type = types.bool;
                default = true;
              };
              text = mkOption {
                type = types.nullOr types.str;
                default = null;
              };
              wantedBy = mkOption {
                type = types.listOf unitNameType;
                default = [ ];
              };
              name = mkOption {
                type = types.str;
                default = name;
              };
              # nixos/lib/systemd-unit-options.nix declares it with no type.
              unit = mkOption { internal = true; };
            };
            config.unit = lib.mkDefault (makeUnit name config);
          }
        )
      );
      default = { };
    };
    globalEnvironment = mkOption {
      type = types.attrsOf (
        types.nullOr (
          types.oneOf [
            types.str
            types.path
            types.package
          ]
        )
      );
      default = { };
    };
  };

  config = {
    systemd.globalEnvironment = {
      LOCALE_ARCHIVE = "${pkgs.glibcLocales}/lib/locale/locale-archive";
      TZDIR = "${pkgs.tzdata}/share/zoneinfo";
    };
    systemd.units = lib.mapAttrs' (_: def: lib.nameValuePair def.name (serviceToUnit def)) cfg.services;
    warnings = lib.concatLists (
      lib.mapAttrsToList (
        name: def:
        lib.optional (
          lib.elem "network-online.target" def.after
          && !(lib.elem "network-online.target" (def.wants ++ def.requires ++ def.bindsTo))
        ) "${name}.service is ordered after 'network-online.target' but doesn't depend on it"
      ) cfg.services
    );
  };
}
