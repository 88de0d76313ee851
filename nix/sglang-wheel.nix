# SGLang 0.5.9 as a wheel with exactly the patch series applied: the pinned PyPI wheel,
# unpacked, patched with GNU patch (no fuzz: a patch that does not apply exactly fails the
# build) and packed again, by scripts/patch-wheel.sh (tests/test_build_scripts.py runs the
# same script on a copy of the wheel named the way the store names it).
{ pkgs, python }:
let
  pins = import ./pins.nix;
  series = import ./patch-series.nix;
  pristine = pkgs.fetchurl (pins.fetchurlArgs "sglang");
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
    bash ${./scripts/patch-wheel.sh} ${pristine} ${pins.artifacts.sglang.wheel} $out ${toString series.patches}
  ''
