# SGLang as a wheel with exactly its version's patch series applied: the pinned PyPI wheel,
# unpacked, patched with GNU patch (no fuzz: a patch that does not apply exactly fails the
# build) and packed again, by scripts/patch-wheel.sh (tests/test_build_scripts.py runs the
# same script on a copy of each stack's wheel named the way the store names it).
{
  pkgs,
  python,
  # A stack of nix/pins.json, as pins.stackOf gives it.
  stack,
}:
let
  pins = import ./pins.nix;
  series = import ./patch-series.nix stack.version;
  pristine = pkgs.fetchurl (pins.fetchurlArgs stack.sglang);
in
pkgs.runCommand "sglang-${series.version}-patched-wheel"
  {
    nativeBuildInputs = [
      pkgs.patch
      (python.withPackages (ps: [ ps.wheel ]))
    ];
    PATCH_FLAGS = toString series.flags;
    passthru = { inherit pristine series; };
  }
  ''
    bash ${./scripts/patch-wheel.sh} ${pristine} ${stack.sglangPin.wheel} $out ${toString series.patches}
  ''
