# Every pinned artifact, read from pins.json (shared with the Python side), and the pinned
# stacks. Builtins only, so the tests evaluate it with plain `nix-instantiate --eval`.
let
  pins = builtins.fromJSON (builtins.readFile ./pins.json);
  artifacts = removeAttrs pins [
    "_comment"
    "stack"
    "stacks"
  ];
  stacks = removeAttrs pins.stacks [ "_comment" ];
  isSha256 = h: builtins.isString h && builtins.match "[0-9a-f]{64}" h != null;
in
rec {
  inherit (pins) stack;
  inherit artifacts stacks;

  # The stack of SGLang `version` (null: the default one), with its version and the pin of
  # its SGLang wheel (sglangPin; `sglang` is that pin's name). An unknown version stops evaluation and names the known ones.
  stackOf =
    version:
    let
      v = if version == null then stack.default else version;
      s =
        stacks.${v}
          or (throw "nix/pins.json has no stack '${v}'; the pinned stacks are: ${builtins.concatStringsSep ", " (builtins.attrNames stacks)}");
      sglangPin = artifacts.${s.sglang};
    in
    assert sglangPin.version == v || throw "nix/pins.json: stack '${v}' pins SGLang ${sglangPin.version} ('${s.sglang}')";
    s
    // {
      version = v;
      inherit sglangPin;
      isDefault = v == stack.default;
    };

  # Arguments for fetchurl. A pin without a verified hash stops evaluation and says
  # how to fill it, instead of building from a placeholder.
  fetchurlArgs =
    name:
    let
      pin = artifacts.${name} or (throw "nix/pins.json has no pin named '${name}'");
    in
    if isSha256 (pin.sha256 or null) then
      {
        inherit (pin) url sha256;
        name = pin.wheel;
      }
    else
      throw ''
        nix/pins.json: '${name}' (${pin.url}) has no verified sha256.
        On a host with network access run
          nix store prefetch-file --json --hash-type sha256 '${pin.url}'
        and put the hex "hash" it prints into nix/pins.json.
      '';
}
