# Not part of the mirror: the stand-in's use tracer. When the assembled stand-in has a file
# `trace-uses` at its root (tests/test_nixpkgs_standin.py writes it), `import nixpkgs`,
# `legacyPackages` and `lib.nixosSystem` hand out the package set through `wrap`, which
# prints one line per use, as the evaluation forces it:
#
#   trace: nixpkgs-use {"path":["cudaPackages_13_0","cuda_nvcc"]}          an attribute read
#   trace: nixpkgs-use {"path":["fetchurl"],"position":0,"args":["name","sha256","url"]}   a call
#
# Attribution is by instance: the flake, nix/ and modules/ get the traced set; what they pass
# to the stand-in's functions, to another flake's code (a callPackage of a function value, i.e.
# pyproject.nix) and to the stand-in's own NixOS modules is unwrapped first (`untrace`), so the
# stand-in's internals and uv2nix never show up as uses of the flake.
{ lib }:
let
  # The untraced value behind a traced attribute set.
  marker = "__nixpkgsStandInUntraced";
  # Read by string interpolation, isDerivation and lib.getOutput on every derivation: not uses.
  unrecorded = [
    "type"
    "outPath"
    "drvPath"
    "outputName"
    "outputSpecified"
    marker
  ];
  # Deeper than this, values are handed out as they are (pkgs.a.b.c.d is recorded, .e is not).
  maxDepth = 5;

  record = entry: value: builtins.trace "nixpkgs-use ${builtins.toJSON entry}" value;

  untrace =
    v:
    if builtins.isAttrs v then
      if v ? ${marker} then
        v.${marker}
      else if lib.isDerivation v || v ? _type || v ? __functor then
        v
      else
        lib.mapAttrs (_: untrace) v
    else if builtins.isList v then
      map untrace v
    else
      v;

  shape =
    x:
    if builtins.isAttrs x && !lib.isDerivation x && !(x ? __functor) then
      lib.filter (n: n != marker) (builtins.attrNames x)
    else
      builtins.typeOf x;

  wrapFunction =
    path: position: f:
    wrapFunctionKeeping [ ] path position f;

  # `keep`: arguments handed on as they are (lib.nixosSystem's modules: a copy of an attribute
  # set loses where it was written, which the options tracer, nixos/trace-options.nix, reports).
  wrapFunctionKeeping =
    keep: path: position: f:
    let
      untraceArgs =
        x:
        if keep != [ ] && builtins.isAttrs x && !(x ? ${marker}) then
          lib.mapAttrs (n: v: if lib.elem n keep then v else untrace v) x
        else
          untrace x;
      call =
        x:
        let
          result = f (untraceArgs x);
        in
        record {
          inherit path position;
          args = shape x;
        } (wrapResult path (position + 1) result);
      formals = lib.functionArgs f;
    in
    if formals == { } then call else lib.setFunctionArgs call formals;

  # A function's result: a further curried argument, or a plain attribute set (formats.json { })
  # whose attributes are read like the function's own; a derivation it built is the flake's.
  wrapResult =
    path: position: result:
    if lib.isFunction result then
      wrapFunction path position result
    else if builtins.isAttrs result && !lib.isDerivation result && !(result ? _type) then
      wrapAttrs path 1 result
    else
      result;

  wrapAttrs =
    path: depth: set:
    lib.mapAttrs (
      n: v:
      let
        path' = path ++ [ n ];
        wrapped = wrap path' (depth + 1) v;
      in
      if lib.elem n unrecorded then v else record { path = path'; } wrapped
    ) set
    // {
      ${marker} = set;
    };

  wrap =
    path: depth: v:
    if depth > maxDepth then
      v
    else if lib.isFunction v then
      wrapFunction path 0 v
    else if builtins.isAttrs v && !(v ? _type) then
      wrapAttrs path depth v
    else
      v;

  # The whole package set. `pkgs` is the traced set itself; callPackage traces the files of the
  # flake (a path) and hands another flake's function (pyproject.nix's builders) the untraced set.
  wrapPackages =
    pkgs:
    let
      traced =
        wrapAttrs [ ] 0 (
          removeAttrs pkgs [
            "lib"
            "pkgs"
            "callPackage"
          ]
        )
        // {
          inherit (pkgs) lib;
          pkgs = traced;
          callPackage =
            fn: args:
            record {
              path = [ "callPackage" ];
              position = 0;
              args = if builtins.isPath fn then "path" else builtins.typeOf fn;
            } (if builtins.isPath fn then lib.callPackageWith traced fn args else pkgs.callPackage fn (untrace args));
          ${marker} = pkgs;
        };
    in
    traced;
in
{
  inherit untrace wrapPackages;
  # lib.nixosSystem: a traced function of the nixpkgs flake's outputs; its modules are handed on
  # as they are (they hold no traced set: packages are not wrapped).
  wrapNixosSystem = wrapFunctionKeeping [ "modules" ] [ "lib" "nixosSystem" ] 0;
  # A NixOS module of the stand-in's own (nixos/modules/*.nix): it sees the untraced set, as
  # the real module would see nixpkgs, so its uses are not counted as the flake's.
  untracedModule =
    file:
    let
      module = import file;
      withUntraced = args: module (args // { pkgs = untrace args.pkgs; });
    in
    {
      _file = file;
      key = toString file;
      imports = [
        (if lib.isFunction module then lib.setFunctionArgs withUntraced (lib.functionArgs module) else module)
      ];
    };
}
