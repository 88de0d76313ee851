# The launcher's settings schema (modules/settings-schema.json, exported from
# python/src/sglang_eagle3/serving/settings.py) as plain descriptors the NixOS module turns
# into options, so no field is described twice. Builtins only: the tests evaluate it.
#
#   { tp_size = { kind = "int"; nullable = false; min = 1; max = null; values = null;
#                 default = 8; description = "..."; flag = "--tp-size"; }; ... }
#
# kind "nonEmptyStr" for a string the schema gives minLength 1 (model_path, host: types.nonEmptyStr),
# and multiNodeDefault where the schema gives it (enable_flashinfer_allreduce_fusion).
{
  schema ? builtins.fromJSON (builtins.readFile ../modules/settings-schema.json),
}:
let
  # { anyOf = [ X { type = "null"; } ] } -> X, nullable
  variants = prop: prop.anyOf or [ prop ];
  nonNull = prop: builtins.filter (v: (v.type or null) != "null") (variants prop);
  describe =
    name: prop:
    let
      v = builtins.head (nonNull prop);
      kinds = {
        integer = "int";
        number = "float";
        boolean = "bool";
        string = "str";
      };
      kind =
        if v ? enum then
          "enum"
        else if v.type == "array" then
          "listOfStr"
        else if v.type == "object" then
          "attrsOfStr"
        else if v.type == "string" && (v.minLength or 0) >= 1 then
          "nonEmptyStr"
        else
          kinds.${v.type} or (throw "settings-options.nix: ${name} has unsupported type ${v.type}");
    in
    {
      inherit kind;
      nullable = builtins.length (nonNull prop) < builtins.length (variants prop);
      min = v.minimum or v.exclusiveMinimum or null;
      max = v.maximum or v.exclusiveMaximum or null;
      values = v.enum or null;
      default = prop.default or null;
      description = prop.description or name;
      flag = prop.sglangFlag or null;
    }
    # A setting SGLang keeps to one node: its default when the model spans hosts (nnodes > 1).
    // (if prop ? multiNodeDefault then { inherit (prop) multiNodeDefault; } else { });
in
builtins.mapAttrs describe schema.properties
