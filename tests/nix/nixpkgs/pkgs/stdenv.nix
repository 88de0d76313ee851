# Stand-in for nixpkgs' stdenv.
#
# mkDerivation mirrors pkgs/stdenv/generic/make-derivation.nix: the `finalAttrs:` fixpoint
# and `finalAttrs.finalPackage`, `overrideAttrs` (both `old:` and `final: prev:` forms),
# `passthru` and `meta` kept out of the derivation and merged into the result, `env`
# checked (no overlap with derivation attributes; only strings, booleans, integers and
# derivations), `name` from `pname` + `version`, multiple `outputs`. The validity checks
# mirror pkgs/stdenv/generic/check-meta.nix: an unfree licence needs `config.allowUnfree`,
# and `meta.platforms` must contain the host platform; like the real ones, they fire when
# `drvPath` or `outPath` is used, not when the attribute set is merely looked at.
#
# The builder is the host's bash running ./builder.sh, which understands `buildCommand`
# (runCommand, writeText, ...) and puts the `bin` directories of the inputs on PATH, so
# the small derivations can be built for real on a machine without nixpkgs; anything that
# needs nixpkgs' generic phases refuses to build (evaluation only).
{
  lib,
  config,
  system,
}:
let
  inherit (lib)
    assertMsg
    concatMapStringsSep
    isDerivation
    optionalAttrs
    ;

  platform = lib.systems.elaborate system;

  # Consumed by mkDerivation itself, never environment variables of the build.
  notDerivationAttrs = [
    "passthru"
    "meta"
    "env"
    "pos"
    "nativeCheckInputs"
    "checkInputs"
  ];

  checkedEnv =
    name: env: derivationArgs:
    let
      overlapping = builtins.attrNames (builtins.intersectAttrs env derivationArgs);
    in
    assert assertMsg (overlapping == [ ]) ''
      ${name}: The `env` attribute set cannot contain any attributes passed to derivation. The following attributes are overlapping:
      ${concatMapStringsSep "\n" (n: "  - ${n}") overlapping}'';
    lib.mapAttrs (
      n: v:
      assert assertMsg (builtins.isString v || builtins.isBool v || builtins.isInt v || isDerivation v)
        "${name}: The `env` attribute set can only contain derivation, string, boolean or integer attributes. The `${n}` attribute is of type ${builtins.typeOf v}.";
      v
    ) env;

  # check-meta.nix: true, or a throw that fires when drvPath/outPath is forced.
  validity =
    name: meta:
    let
      license = meta.license or { };
      licenses = if builtins.isList license then license else [ license ];
      unfree = lib.any (l: (l.free or true) == false) licenses;
      platforms = meta.platforms or null;
      refuse = why: throw "Refusing to evaluate package '${name}' in ${meta.position or "(stand-in)"} because it ${why}";
    in
    if unfree && !(config.allowUnfree or false) then
      refuse "has an unfree license (‘${concatMapStringsSep ", " (l: l.shortName or "unfree") licenses}’), refusing to evaluate. To allow unfree packages set `nixpkgs.config.allowUnfree = true` (or `config.allowUnfree = true` when importing nixpkgs)."
    else if (meta.broken or false) && !(config.allowBroken or false) then
      refuse "is marked as broken"
    else if platforms != null && !(lib.meta.availableOn platform { meta = { inherit platforms; }; }) then
      refuse "is not available on the requested hostPlatform:\n  hostPlatform.system = \"${system}\"\n  package.meta.platforms = ${builtins.toJSON platforms}"
    else
      true;

  # make-derivation.nix maps every dependency through getDev (so `buildInputs = [ pkg ]`
  # brings in `pkg.dev` when there is one) and rejects elements of other types.
  dependencyLists = [
    "depsBuildBuild"
    "depsBuildBuildPropagated"
    "nativeBuildInputs"
    "propagatedNativeBuildInputs"
    "depsBuildTarget"
    "depsBuildTargetPropagated"
    "depsHostHost"
    "depsHostHostPropagated"
    "buildInputs"
    "propagatedBuildInputs"
    "depsTargetTarget"
    "depsTargetTargetPropagated"
  ];
  normaliseDependencies =
    name: attrs:
    lib.genAttrs (lib.filter (n: attrs ? ${n}) dependencyLists) (
      list:
      lib.imap1 (
        i: dep:
        if isDerivation dep then
          lib.getDev dep
        else if dep == null || builtins.isString dep || builtins.isPath dep then
          dep
        else
          throw "Dependency is not of a valid type: element ${toString i} of ${list} for ${name}"
      ) (lib.flatten attrs.${list})
    );

  mkDerivationSimple =
    overrideAttrs: attrs:
    let
      name =
        if attrs ? name then
          lib.strings.sanitizeDerivationName attrs.name
        else
          assert assertMsg (
            attrs ? pname && attrs ? version
          ) "mkDerivation: either `name` or both `pname` and `version` must be set";
          assert assertMsg (attrs.version != null) "The `version` attribute cannot be null.";
          "${attrs.pname}-${attrs.version}";
      passthru = attrs.passthru or { };
      meta = {
        inherit name;
      }
      // optionalAttrs (attrs ? pname) { inherit (attrs) pname; }
      // (attrs.meta or { });
      derivationArgs =
        removeAttrs attrs notDerivationAttrs
        // normaliseDependencies name attrs
        // {
          inherit name system;
          builder = "/bin/bash";
          args = [
            "-e"
            ./builder.sh
          ];
        };
      drv = builtins.derivation (derivationArgs // checkedEnv name (attrs.env or { }) derivationArgs);
    in
    lib.extendDerivation (validity name meta) (
      passthru
      // {
        inherit meta passthru overrideAttrs;
      }
    ) drv;

  # make-derivation.nix's makeDerivationExtensible.
  mkDerivationExtensible =
    rattrs:
    let
      args = rattrs (args // { inherit finalPackage overrideAttrs; });
      finalPackage = mkDerivationSimple overrideAttrs args;
      # Attribute set, `old:` or `final: prev:` (lib.toExtension), merged with a shallow //.
      overrideAttrs =
        f0:
        mkDerivationExtensible (
          final:
          let
            prev = rattrs final;
          in
          prev // lib.toExtension f0 final prev
        );
    in
    finalPackage;

  mkDerivation =
    fnOrAttrs:
    if builtins.isFunction fnOrAttrs then mkDerivationExtensible fnOrAttrs else mkDerivationExtensible (_: fnOrAttrs);

  glibc = {
    pname = "glibc";
    version = "2.40";
    linuxHeaders.version = "6.12";
  };
in
{
  name = "stdenv-linux";
  inherit system mkDerivation;
  hostPlatform = platform;
  buildPlatform = platform;
  targetPlatform = platform;
  inherit (platform) isLinux isDarwin isx86_64 isAarch64;
  shell = "/bin/bash";
  cc = {
    libc = glibc;
    cc.lib = mkDerivation {
      pname = "gcc";
      version = "14.3.0";
      outputs = [
        "out"
        "lib"
      ];
    };
    isGNU = true;
  };
}
