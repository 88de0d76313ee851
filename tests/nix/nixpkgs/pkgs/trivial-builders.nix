# Stand-ins for nixpkgs' trivial builders, with their argument shapes:
#   runCommand, runCommandLocal, runCommandWith, writeTextFile, writeText, writeShellScript,
#   writeShellScriptBin, symlinkJoin, linkFarm      pkgs/build-support/trivial-builders/default.nix
#   makeSetupHook                                     pkgs/build-support/trivial-builders/default.nix
#   replaceVars                                       pkgs/build-support/replace-vars/replace-vars.nix
#   mkShell                                           pkgs/build-support/mkshell/default.nix
#   formats.{json,yaml,ini}                           pkgs/pkgs-lib/formats.nix
#   closureInfo                                       pkgs/build-support/closure-info.nix
{
  lib,
  stdenv,
  hostTool,
}:
let
  inherit (lib) optionalAttrs;

  runCommandWith =
    {
      stdenv ? stdenv',
      runLocal ? false,
      derivationArgs ? { },
      name,
    }:
    buildCommand:
    stdenv.mkDerivation (
      {
        enableParallelBuilding = true;
        inherit buildCommand name;
        passAsFile = [ "buildCommand" ] ++ (derivationArgs.passAsFile or [ ]);
      }
      // lib.optionalAttrs runLocal {
        preferLocalBuild = true;
        allowSubstitutes = false;
      }
      // removeAttrs derivationArgs [ "passAsFile" ]
    );
  stdenv' = stdenv;

  runCommand =
    name: env:
    runCommandWith {
      inherit name;
      derivationArgs = env;
    };

  writeTextFile =
    {
      name,
      text,
      executable ? false,
      destination ? "",
      checkPhase ? "",
      meta ? { },
      passthru ? { },
      allowSubstitutes ? false,
      preferLocalBuild ? true,
      derivationArgs ? { },
    }:
    assert lib.assertMsg (destination != "" -> (lib.hasPrefix "/" destination && destination != "/")) ''
      destination must be an absolute path, relative to the derivation's out path,
      got '${destination}' instead.'';
    runCommand name
      (
        {
          inherit
            text
            executable
            checkPhase
            allowSubstitutes
            preferLocalBuild
            ;
          passAsFile = [ "text" ] ++ derivationArgs.passAsFile or [ ];
          meta =
            lib.optionalAttrs (executable && destination != "") {
              mainProgram = lib.last (lib.splitString "/" destination);
            }
            // meta;
          passthru = passthru // optionalAttrs (executable && destination == "") { };
        }
        // removeAttrs derivationArgs [ "passAsFile" ]
      )
      ''
        target=$out${lib.escapeShellArg destination}
        mkdir -p "$(dirname "$target")"
        if [ -e "$textPath" ]; then mv "$textPath" "$target"; else echo -n "$text" > "$target"; fi
        if [ -n "$executable" ]; then chmod +x "$target"; fi
        eval "$checkPhase"
      '';

  writeText = name: text: writeTextFile { inherit name text; };

  writeShellScript =
    name: text:
    writeTextFile {
      inherit name;
      executable = true;
      text = ''
        #!${stdenv.shell}
        ${text}
      '';
      checkPhase = ''
        ${stdenv.shell} -n "$target"
      '';
    };

  writeShellScriptBin =
    name: text:
    writeTextFile {
      inherit name;
      executable = true;
      destination = "/bin/${name}";
      text = ''
        #!${stdenv.shell}
        ${text}
      '';
      meta.mainProgram = name;
    };

  symlinkJoin =
    args_@{
      name ?
        assert lib.assertMsg (args_ ? pname && args_ ? version)
          "symlinkJoin requires either a `name` OR `pname` and `version`";
        "${args_.pname}-${args_.version}",
      paths,
      stripPrefix ? "",
      preferLocalBuild ? true,
      allowSubstitutes ? false,
      postBuild ? "",
      failOnMissing ? stripPrefix == "",
      ...
    }:
    let
      args = removeAttrs args_ [
        "name"
        "postBuild"
        "stripPrefix"
        "paths"
        "failOnMissing"
      ];
    in
    runCommand name
      (
        args
        // {
          inherit preferLocalBuild allowSubstitutes;
          paths = map (p: "${p}${stripPrefix}") paths;
          passAsFile = [ "paths" ];
        }
      )
      ''
        mkdir -p $out
        for i in $(cat $pathsPath); do
          if [ -d "$i" ]; then cp -rs --no-preserve=mode "$i"/. $out/; fi
        done
        ${postBuild}
      '';

  linkFarm =
    name: entries:
    let
      entries' =
        if (lib.isAttrs entries) then
          entries
        else if (lib.isList entries) then
          lib.listToAttrs (map (x: lib.nameValuePair x.name x.path) entries)
        else
          throw "linkFarm entries must be either attrs or a list!";
      linkCommands = lib.mapAttrsToList (n: p: ''
        mkdir -p -- "$(dirname -- ${lib.escapeShellArg "${n}"})"
        ln -s -- ${lib.escapeShellArg "${p}"} ${lib.escapeShellArg "${n}"}
      '') entries';
    in
    runCommand name
      {
        preferLocalBuild = true;
        allowSubstitutes = false;
        passthru.entries = entries';
      }
      ''
        mkdir -p $out
        cd $out
        ${lib.concatStrings linkCommands}
      '';

  makeSetupHook =
    {
      name ? lib.warn "calling makeSetupHook without passing a name is deprecated." "hook",
      propagatedBuildInputs ? [ ],
      propagatedNativeBuildInputs ? [ ],
      depsTargetTargetPropagated ? [ ],
      meta ? { },
      passthru ? { },
      substitutions ? { },
    }:
    script:
    runCommand name
      (
        substitutions
        // {
          inherit
            meta
            propagatedBuildInputs
            propagatedNativeBuildInputs
            depsTargetTargetPropagated
            ;
          __structuredAttrs = false;
          strictDeps = true;
          passthru = passthru // {
            inherit substitutions;
          };
        }
      )
      ''
        mkdir -p $out/nix-support
        cp ${script} $out/nix-support/setup-hook
      '';

  replaceVars =
    src: replacements:
    let
      replacements' = lib.filterAttrs (_: v: v != null) replacements;
    in
    runCommand (baseNameOf (toString src)) { } ''
      replace_fail() {
        local content
        content=$(<"$out")
        if [[ $content != *"$1"* ]]; then echo "replaceVars: $1 does not occur in ${src}" >&2; exit 1; fi
        printf '%s\n' "''${content//"$1"/"$2"}" > "$out"
      }
      cp ${src} $out
      chmod u+w $out
      ${lib.concatStrings (
        lib.mapAttrsToList (
          k: v: "replace_fail ${lib.escapeShellArg "@${k}@"} ${lib.escapeShellArg (toString v)}\n"
        ) replacements'
      )}
    '';

  mkShell =
    {
      name ? "nix-shell",
      packages ? [ ],
      inputsFrom ? [ ],
      buildInputs ? [ ],
      nativeBuildInputs ? [ ],
      propagatedBuildInputs ? [ ],
      propagatedNativeBuildInputs ? [ ],
      ...
    }@attrs:
    let
      mergeInputs = attr: (attrs.${attr} or [ ]) ++ lib.concatMap (drv: drv.${attr} or [ ]) inputsFrom;
      rest = removeAttrs attrs [
        "name"
        "packages"
        "inputsFrom"
        "buildInputs"
        "nativeBuildInputs"
        "propagatedBuildInputs"
        "propagatedNativeBuildInputs"
        "shellHook"
      ];
    in
    stdenv.mkDerivation (
      {
        inherit name;
        buildInputs = mergeInputs "buildInputs";
        nativeBuildInputs = packages ++ mergeInputs "nativeBuildInputs";
        propagatedBuildInputs = mergeInputs "propagatedBuildInputs";
        propagatedNativeBuildInputs = mergeInputs "propagatedNativeBuildInputs";
        shellHook = lib.concatStringsSep "\n" (
          lib.catAttrs "shellHook" (lib.reverseList inputsFrom ++ [ attrs ])
        );
        buildCommand = ''
          echo "------------------------------------------------------------" >>$out
          echo " WARNING: the existence of this path is not guaranteed." >>$out
          echo " It is an internal implementation detail for pkgs.mkShell." >>$out
          echo "------------------------------------------------------------" >>$out
          echo >> $out
          export >> $out
        '';
        preferLocalBuild = true;
      }
      // rest
    );

  # formats.nix's value type of the structured formats, named by the format.
  valueTypeOf =
    description:
    with lib.types;
    let
      valueType =
        nullOr (oneOf [
          bool
          int
          float
          str
          path
          (attrsOf valueType)
          (listOf valueType)
        ])
        // {
          inherit description;
        };
    in
    valueType;

  formats = {
    json =
      { }:
      {
        type = valueTypeOf "JSON value";
        generate =
          name: value:
          runCommand name
            {
              value = builtins.toJSON value;
              passAsFile = [ "value" ];
              nativeBuildInputs = [ (hostTool "jq" "1.7.1" [ "jq" ]) ];
              preferLocalBuild = true;
            }
            ''
              jq . "$valuePath" > $out
            '';
      };
    # yaml = yaml_1_1; the file is written as JSON, which is YAML (nixpkgs runs json2yaml).
    yaml =
      { }:
      {
        type = valueTypeOf "YAML 1.1 value";
        generate = name: value: writeText name (builtins.toJSON value);
      };
    # ini: sections of INI atoms; with listToValue, an atom may also be a non-empty list, which
    # generate joins with it (listsAsDuplicateKeys is not mirrored).
    ini =
      {
        listToValue ? null,
        ...
      }@args:
      let
        singleIniAtom =
          with lib.types;
          nullOr (oneOf [
            bool
            int
            float
            str
          ])
          // {
            description = "INI atom (null, bool, int, float or string)";
          };
        atom =
          if listToValue == null then
            singleIniAtom
          else
            lib.types.either singleIniAtom (lib.types.nonEmptyListOf singleIniAtom)
            // {
              description = singleIniAtom.description + " or a non-empty list of them";
            };
        joinLists =
          if listToValue == null then lib.id else lib.mapAttrs (_: v: if builtins.isList v then listToValue v else v);
      in
      {
        type = lib.types.attrsOf (
          lib.types.attrsOf atom
          // {
            description = "section of an INI file (attrs of " + atom.description + ")";
          }
        );
        generate =
          name: value:
          writeText name (lib.generators.toINI (removeAttrs args [ "listToValue" ]) (lib.mapAttrs (_: joinLists) value));
      };
  };
in
{
  inherit
    runCommandWith
    runCommand
    writeTextFile
    writeText
    writeShellScript
    writeShellScriptBin
    symlinkJoin
    linkFarm
    makeSetupHook
    replaceVars
    mkShell
    formats
    ;
  runCommandLocal =
    name: env:
    runCommandWith {
      inherit name;
      runLocal = true;
      derivationArgs = env;
    };
  runCommandNoCC = runCommand;

  # The real one's outputs ($out/registration: path, narHash, narSize, deriver "", number of
  # references, the references; $out/store-paths; $out/total-nar-size), from the same
  # structured-attrs closure JSON; built here by the host's bash and jq.
  closureInfo =
    { rootPaths }:
    derivation {
      name = "closure-info";
      inherit (stdenv) system;
      builder = "/bin/bash";
      __structuredAttrs = true;
      exportReferencesGraph.closure = rootPaths;
      preferLocalBuild = true;
      args = [
        "-ec"
        ''
          . "$NIX_ATTRS_SH_FILE"
          export PATH=/usr/local/bin:/usr/bin:/bin
          out=''${outputs[out]}
          mkdir "$out"
          jq -r ".closure | map(.narSize) | add" < "$NIX_ATTRS_JSON_FILE" > "$out/total-nar-size"
          jq -r '.closure | map([.path, .narHash, .narSize, "", (.references | length)] + .references) | add | map("\(.)\n") | add' < "$NIX_ATTRS_JSON_FILE" | head -n -1 > "$out/registration"
          jq -r '.closure[].path' < "$NIX_ATTRS_JSON_FILE" > "$out/store-paths"
        ''
      ];
    };
}
