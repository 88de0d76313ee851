# Not part of the mirror: the tracer of the NixOS options the flake's modules use. When the
# assembled stand-in has a file `trace-uses` at its root (tests/test_nixos_options_standin.py),
# eval-config.nix hands every module it is given (not NixOS's own, ./modules/*.nix) through
# `traceModules`, and the evaluated system's `config` through `readConfig`. One line per use:
#
#   trace: nixos-option {"use":"read","option":"hardware.nvidia.enabled","file":".../sglang-eagle3.nix"}
#   trace: nixos-option {"use":"set","option":"systemd.services.<name>.path","file":".../sglang-eagle3.nix"}
#   trace: nixos-option {"use":"read","option":"boot.kernelPackages","value":["nvidiaPackages","latest"],...}
#
# - read: the module read `config.<option>` (an option of a submodule is read through the
#   option holding it: `<name>` for an attribute set's element, `*` for a list's); `value` is
#   what it read on an option's value that is itself an attribute set (a package set);
# - set: the module defines the option. Every definition is walked, whatever the conditions of
#   its mkIf say (a branch this evaluation does not take is walked too); `declared: false` is a
#   definition of an option the stand-in does not declare.
# Only NixOS's options are traced (declared in this stand-in's modules); the flake's own
# (services.sglang-eagle3, services.sglang-router) are handed out as they are.
{ lib }:
let
  inherit (lib) isOption showOption;
  # Everything declared under here is the stand-in's, i.e. nixpkgs'.
  standIn = toString ./..;
  ofStandIn = file: lib.hasPrefix standIn (toString file);
  nixosOption = o: o.declarations != [ ] && lib.all ofStandIn o.declarations;

  record = entry: value: builtins.trace "nixos-option ${builtins.toJSON entry}" value;
  recordOption =
    use: file: o:
    record {
      inherit use file;
      option = showOption o.loc;
    };

  # Types whose values hold options (or values that do): what the walks descend into.
  elemOf = type: type.nestedTypes.elemType or null;
  containers = [
    "attrsOf"
    "lazyAttrsOf"
    "listOf"
    "nullOr"
    "unique"
  ];
  holdsOptions =
    type:
    type != null && (type.name == "submodule" || (lib.elem type.name containers && holdsOptions (elemOf type)));
  # Options whose value may be a package set read further (boot.kernelPackages).
  looseTypes = [
    "raw"
    "unspecified"
    "attrs"
  ];

  # -- reads --------------------------------------------------------------------------------

  # `config` (or a submodule's value) at an option tree node, with each option's reads traced.
  readNode =
    file: node: value:
    if !builtins.isAttrs value then
      value
    else
      lib.mapAttrs (
        n: v:
        let
          o = node.${n};
        in
        if n == "_module" || !(node ? ${n}) then
          v
        else if isOption o then
          (if nixosOption o then recordOption "read" file o (readValue file o.type o.loc v) else v)
        else if builtins.isAttrs o then
          readNode file o v
        else
          v
      ) value;

  # An option's value, read further where its type holds options.
  readValue =
    file: type: loc:
    if type.name == "submodule" then
      readNode file (type.getSubOptions loc)
    else if lib.elem type.name containers && holdsOptions (elemOf type) then
      let
        elem = elemOf type;
      in
      if type.name == "listOf" then
        map (readValue file elem (loc ++ [ "*" ]))
      else if type.name == "nullOr" || type.name == "unique" then
        v: if v == null then v else readValue file elem loc v
      else
        let
          read = readValue file elem (loc ++ [ "<name>" ]);
        in
        lib.mapAttrs (_: read)
    else if lib.elem type.name looseTypes then
      readLoose file loc [ ] 2
    else
      v: v;

  # A package set in a loosely typed option: what is read on it, two attributes deep.
  readLoose =
    file: loc: rest: depth: v:
    if depth == 0 || !builtins.isAttrs v || lib.isDerivation v then
      v
    else
      lib.mapAttrs (
        n: x:
        record {
          use = "read";
          inherit file;
          option = showOption loc;
          value = rest ++ [ n ];
        } (readLoose file loc (rest ++ [ n ]) (depth - 1) x)
      ) v;

  # -- definitions --------------------------------------------------------------------------

  # A definition's values with mkIf (whatever its condition), mkMerge, mkOverride and mkOrder
  # taken off. A condition is evaluated too, so its reads are traced when the option it guards
  # is never evaluated (tryEval: a condition may throw where its branch does not apply).
  discharge =
    v:
    if builtins.isAttrs v && v ? _type then
      if v._type == "if" then
        builtins.seq (builtins.tryEval v.condition) (discharge v.content)
      else if v._type == "override" || v._type == "order" then
        discharge v.content
      else if v._type == "merge" then
        lib.concatMap discharge v.contents
      else if v._type == "definition" then
        discharge v.value
      else
        [ v ]
    else
      [ v ];

  # The options a definition (`value` at option tree `node`, at `loc`) sets: one trace each,
  # forced with the result. `open`: the node takes undeclared names (a freeform submodule).
  setsAt =
    file: node: loc: open: value:
    lib.concatMap (
      d:
      if !builtins.isAttrs d then
        [ ]
      else
        lib.concatLists (
          lib.mapAttrsToList (
            n: v:
            let
              o = node.${n};
            in
            if n == "_module" then
              [ ]
            else if !(node ? ${n}) then
              lib.optional (!open) (record {
                use = "set";
                inherit file;
                option = showOption (loc ++ [ n ]);
                declared = false;
              } n)
            else if isOption o then
              lib.optionals (nixosOption o) ([ (recordOption "set" file o n) ] ++ setsOfValue file o.type o.loc v)
            else
              setsAt file o (loc ++ [ n ]) false v
          ) d
        )
    ) (discharge value);

  setsOfValue =
    file: type: loc: value:
    if !holdsOptions type then
      # No options below; its mkIf conditions still evaluated (discharge).
      builtins.seq (builtins.length (discharge value)) [ ]
    else if type.name == "submodule" then
      setsAt file (type.getSubOptions loc) loc (type.nestedTypes ? freeformType) value
    else
      let
        elem = elemOf type;
      in
      lib.concatMap (
        d:
        if type.name == "listOf" then
          lib.concatMap (setsOfValue file elem (loc ++ [ "*" ])) (if builtins.isList d then d else [ ])
        else if type.name == "nullOr" || type.name == "unique" then
          lib.optionals (d != null) (setsOfValue file elem loc d)
        else
          lib.concatLists (
            lib.mapAttrsToList (_: setsOfValue file elem (loc ++ [ "<name>" ])) (if builtins.isAttrs d then d else { })
          )
      ) (discharge value);

  # -- modules ------------------------------------------------------------------------------

  # The file a module is written in: its own `_file`, else where its first attribute is.
  fileOf =
    fallback: m:
    let
      names = builtins.attrNames m;
      pos = if names == [ ] then null else builtins.unsafeGetAttrPos (builtins.head names) m;
    in
    if m ? _file then
      toString m._file
    else if pos != null then
      pos.file
    else
      fallback;

  # A module's result, with its imports traced too and, as one more import, an assertion that
  # forces the walk of its definitions: NixOS checks every assertion when the system is built,
  # and the module checks force them all, by then `config` can be read.
  traceResult =
    file: args: m:
    let
      full = m ? config || m ? options;
      definitions =
        if full then
          m.config or { }
        else
          removeAttrs m [
            "_class"
            "_file"
            "key"
            "disabledModules"
            "require"
            "imports"
            "freeformType"
          ];
      sets = setsAt file args.options [ ] false definitions;
      probe = {
        _file = file;
        assertions = [
          {
            assertion = builtins.deepSeq sets true;
            message = "tests/nix/nixpkgs/nixos/trace-options.nix";
          }
        ];
      };
    in
    removeAttrs m [ "require" ]
    // {
      imports = map (traceModule file) (m.require or [ ] ++ m.imports or [ ]) ++ [ probe ];
    };

  # A module as the module system loads it (a function of its arguments, or an attribute set),
  # traced. Its file is known once it is called (a module's shape cannot depend on `config`).
  traceLoaded =
    fallback: m:
    if lib.isFunction m then
      lib.setFunctionArgs (
        args:
        let
          result = m (args // { config = readNode file args.options args.config; });
          file = fileOf fallback result;
        in
        traceResult file args result
      ) (lib.functionArgs m)
    else if builtins.isAttrs m && (m._type or "module") == "module" && !(ofStandIn (m._file or "")) then
      lib.setFunctionArgs (args: traceResult (fileOf fallback m) args m) {
        config = false;
        options = false;
      }
    else
      m;

  traceModule =
    fallback: m:
    if builtins.isPath m || builtins.isString m then
      let
        file = toString m;
      in
      {
        _file = file;
        key = file;
        imports = [ (traceLoaded file (import m)) ];
      }
    else
      traceLoaded fallback m;
in
{
  # The modules given to eval-config.nix, each traced.
  traceModules = map (traceModule "<a module given to lib.nixosSystem>");
  # The evaluated system's `config`, its reads traced (by whoever reads it: the module checks).
  readConfig = options: readNode "<the evaluated system's config>" options;
}
