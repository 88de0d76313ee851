# What the nixpkgs stand-in's NixOS (tests/nix/nixpkgs/nixos, assembled with nixpkgs' lib)
# declares at each row of tests/nix/nixos-options.json, for tests/test_nixos_options_standin.py
# to compare with the row: found, the type's name and description, readOnly, the default (plain
# values as they are, others as "<type>"; "<none>" when there is none), and each attribute the
# row reads on the default value. Also each row's declared type evaluated with lib where it is
# written with lib.types alone (the table's own consistency).
{ nixpkgs, table }:
let
  lib = import (nixpkgs + "/lib");
  rows = (lib.importJSON table).options;
  # No module of the flake: the stand-in's own NixOS, for x86_64-linux.
  evaluated = import (nixpkgs + "/nixos/eval-config.nix") {
    inherit lib;
    system = "x86_64-linux";
    modules = [ ];
  };

  # The option at a dotted path: through `<name>` and `*` into the option's element type.
  optionAt =
    path:
    lib.foldl' (
      node: part:
      if node == null then
        null
      else if lib.isOption node then
        (
          if part == "<name>" || part == "*" then
            node.type.getSubOptions node.loc
          else
            (node.type.getSubOptions node.loc).${part} or null
        )
      else
        node.${part} or null
    ) evaluated.options (lib.splitString "." path);

  inherit (import ./plain-value.nix lib) plain;
  describe =
    key: row:
    let
      o = optionAt key;
      found = o != null && lib.isOption o;
      default = if o ? default then o.default else null;
    in
    {
      inherit found;
    }
    // lib.optionalAttrs found {
      name = o.type.name;
      description = o.type.description;
      readOnly = o.readOnly or false;
      default = if o ? default then plain default else "<none>";
      reads = lib.genList (
        i:
        let
          path = lib.splitString "." (lib.elemAt row.reads i);
        in
        lib.hasAttrByPath path default
      ) (lib.length (row.reads or [ ]));
    };
in
lib.mapAttrs describe rows
