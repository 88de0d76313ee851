# What the nixpkgs stand-in (tests/nix/nixpkgs, assembled with nixpkgs' lib) has at each row
# of tests/nix/nixpkgs-attributes.json, for tests/test_nixpkgs_standin.py to compare with the
# row: found, a function's formal arguments, a package's outputs and the programs the stand-in
# installs in each, the value of each attribute the row reads (plain values as they are,
# others as "<type>"), and what a call returns where the row has a `result`. The package set is the flake's: x86_64-linux, unfree and CUDA allowed.
{ nixpkgs, table }:
let
  imported = import nixpkgs {
    system = "x86_64-linux";
    config = {
      allowUnfree = true;
      cudaSupport = true;
    };
  };
  # The stand-in itself, also where it is assembled to trace the flake's uses (nixpkgs/trace.nix).
  pkgs = imported.__nixpkgsStandInUntraced or imported;
  inherit (pkgs) lib;
  flake = (import (nixpkgs + "/flake.nix")).outputs { self = flake; };
  rows = (lib.importJSON table).attributes;

  inherit (import ./plain-value.nix lib) kind plain;
  readAt =
    v: dotted:
    let
      path = lib.splitString "." dotted;
    in
    if lib.hasAttrByPath path v then plain (lib.getAttrFromPath path v) else "<missing>";

  describe =
    key: row:
    let
      path = lib.splitString "." key;
      root = if lib.head path == "lib" then flake else pkgs;
      found = lib.hasAttrByPath path root;
      v = lib.getAttrFromPath path root;
    in
    {
      inherit found;
    }
    // lib.optionalAttrs found {
      kind = kind v;
      formals = if lib.isFunction v then builtins.attrNames (lib.functionArgs v) else null;
      outputs = if lib.isDerivation v then v.outputs or [ "out" ] else null;
      programs = if lib.isDerivation v then v.programsByOutput or null else null;
      # A function's reads are on what it returns (formats.json { } has `generate`).
      reads = lib.genAttrs (lib.attrNames (row.reads or { }) ++ lib.attrNames (row.values or { })) (
        readAt (if lib.isFunction v then v { } else v)
      );
      # What a call with the row's arguments returns (fetchurl's derivation: curl first in
      # nativeBuildInputs), each attribute the row names; a dependency list as its pnames.
      result = if row ? result then resultOf (v row.result.arguments) row.result else null;
    };
  resultOf =
    returned: expected:
    lib.mapAttrs (
      name: _:
      let
        value = returned.${name} or "<missing>";
      in
      if builtins.isList value && lib.all lib.isDerivation value then
        map (d: d.pname or (builtins.parseDrvName d.name).name) value
      else
        plain value
    ) (removeAttrs expected [ "arguments" ]);
in
lib.mapAttrs describe rows
