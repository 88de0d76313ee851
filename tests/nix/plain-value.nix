# How the stand-in checks (standin-attributes.nix, standin-options.nix) hand values to a
# table's JSON: `plain` gives scalars and lists of them as they are (strings without their
# context), the empty attribute set, and anything else as "<its kind>" ("<derivation>",
# "<function>", "<set>", ...).
lib:
let
  kind =
    v:
    if lib.isDerivation v then
      "derivation"
    else if lib.isFunction v then
      "function"
    else
      builtins.typeOf v;
  scalar =
    v:
    lib.elem (builtins.typeOf v) [
      "string"
      "bool"
      "int"
      "float"
      "null"
    ];
  bare = v: if builtins.isString v then builtins.unsafeDiscardStringContext v else v;
in
{
  inherit kind;
  plain =
    v:
    if scalar v then
      bare v
    else if builtins.isList v && lib.all scalar v then
      map bare v
    else if builtins.isAttrs v && v == { } then
      { }
    else
      "<${kind v}>";
}
