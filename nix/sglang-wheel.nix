# SGLang 0.5.9 as a wheel with exactly the patch series applied.
# The pinned PyPI wheel is unpacked, patched with GNU patch (no fuzz: any patch that
# does not apply cleanly fails the build), and packed again (wheel regenerates RECORD).
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
    passthru = { inherit pristine series; };
  }
  ''
    python -m wheel unpack ${pristine} --dest unpacked
    cd unpacked/sglang-${series.version}
    for p in ${toString series.patches}; do
      echo "applying $(basename "$p")"
      patch ${toString series.flags} -i "$p"
    done
    cd ..
    mkdir -p $out
    python -m wheel pack sglang-${series.version} --dest-dir $out
  ''
