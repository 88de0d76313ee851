# `nix flake check` on any Linux builder, no GPU needed.
{
  pkgs,
  stack,
  src,
  moduleChecks,
}:
let
  pins = import ./pins.nix;
in
{
  # Building the patched wheel applies every patch of the series with no fuzz.
  patch-series = stack.sglangWheel;

  # The pytest suite (delegation on a tiny CPU model, probe, settings, launcher,
  # throughput-test logic) against the built environment, inside the sandbox.
  pytest =
    pkgs.runCommand "sglang-eagle3-pytest"
      {
        nativeBuildInputs = [
          stack.testEnv
          pkgs.patch
        ];
        # The pristine wheel for the tests, from the same pin (no network in the sandbox).
        EAGLE3_TESTS_SGLANG_WHEEL = pkgs.fetchurl (pins.fetchurlArgs "sglang");
      }
      ''
        cp -r ${src} source
        chmod -R u+w source
        cd source
        export HOME=$TMPDIR
        python -m pytest -p no:cacheprovider -q tests
        touch $out
      '';

  # Python formatting and lint (ruff, at uv.lock's version), and every .nix file parses.
  formatting =
    pkgs.runCommand "sglang-eagle3-formatting"
      {
        nativeBuildInputs = [
          stack.lintEnv
          pkgs.nix
        ];
      }
      ''
        bash ${./scripts/check-formatting.sh} ${src}
        touch $out
      '';
}
// moduleChecks
