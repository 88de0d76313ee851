# The images of nix/image.nix around a stand-in stack, for building and running them where the
# real stack cannot be built (no GPU, no CUDA, no binary cache), as the router's VM test runs the
# router against a stand-in SGLang server. The image code is the real one; the stack is small:
#
# - SGLang: the stack's pinned wheel with its patch series applied, by the real stack's own
#   derivation (nix/sglang-wheel.nix), unpacked; its `sglang.launch_server` and package
#   `__init__` replaced by the stand-in server (tests/stand_ins/fake_sglang: SGLang's HTTP API,
#   no GPU). Preflight probes the real patched source; `python -m sglang.launch_server` serves.
#   It depends on the series as the real patched SGLang does, so a patch change rebuilds it.
# - sglang-eagle3: this repository's launcher (python/src), run by an interpreter with its
#   dependencies (click, pydantic) and the stand-in server's (prometheus-client);
# - the wrapper: bin/sglang-eagle3 sources nix/scripts/host-driver.sh and sets the series
#   directory, as the real package's makeWrapper wrapper does (nix/stack.nix, runtime-env.nix).
#
#   (import ./nix/tests/image-stand-in.nix { inherit pkgs lib; version = "0.5.9"; }).server
{
  pkgs,
  lib,
  # A stack of nix/pins.json: its wheel and its patch series.
  version ? null,
  revision ? "stand-in",
  standIn ? ../../tests/stand_ins/fake_sglang,
}:
let
  pins = import ../pins.nix;
  pinned = pins.stackOf version;
  python = pkgs."python${lib.replaceStrings [ "." ] [ "" ] pins.stack.python}";
  series = import ../patch-series.nix pinned.version;
  wheel = pkgs.callPackage ../sglang-wheel.nix {
    inherit python;
    stack = pinned;
  };
  site = "lib/python${pins.stack.python}/site-packages";

  sglang =
    pkgs.runCommand "sglang-${pinned.version}-stand-in"
      {
        nativeBuildInputs = [ python ];
      }
      ''
        mkdir -p $out/${site}
        python3 -m zipfile -e ${wheel}/*.whl $out/${site}
        # The stand-in server, and a package __init__ that imports nothing (the real one imports torch
        # and transformers, which the stand-in server does not use).
        cp ${standIn}/sglang/launch_server.py ${standIn}/sglang/fake_metrics.py $out/${site}/sglang/
        echo '"""SGLang ${pinned.version}, patched, with the stand-in server (nix/tests/image-stand-in.nix)."""' \
          > $out/${site}/sglang/__init__.py
      '';

  # The launcher's sources with the pins beside them, where a built wheel has them (pyproject.toml's
  # force-include of ../nix/pins.json): sglang_eagle3/stacks.py reads the stack list from there.
  launcherSrc = builtins.path {
    name = "sglang-eagle3-python-src";
    path = ../../python/src;
    filter = path: _: baseNameOf path != "__pycache__";
  };
  launcher = pkgs.runCommand "sglang-eagle3-src" { } ''
    cp -r ${launcherSrc} $out
    chmod -R u+w $out
    cp ${../pins.json} $out/sglang_eagle3/pins.json
  '';

  interpreter = python.withPackages (ps: [
    ps.click
    ps.pydantic
    ps.prometheus-client
  ]);

  package = pkgs.runCommand "sglang-eagle3-stand-in-sglang-${pinned.version}" { } ''
    mkdir -p $out/bin
    cat > $out/bin/sglang-eagle3 <<'EOS'
    #!${pkgs.bash}/bin/bash -e
    . ${../scripts/host-driver.sh}
    export PYTHONPATH=${launcher}:${sglang}/${site}''${PYTHONPATH:+:$PYTHONPATH}
    export SGLANG_EAGLE3_PATCHES=''${SGLANG_EAGLE3_PATCHES:-${series.dir}}
    exec ${interpreter}/bin/python3 -m sglang_eagle3.cli "$@"
    EOS
    chmod +x $out/bin/sglang-eagle3
  '';

  stack = {
    inherit (pinned) version;
    inherit series package;
    # The router's image needs no stand-in to be built here: its closure is the real router
    # environment's (evaluated with the flake, tests/test_image.py).
    routerEnv = throw "image-stand-in.nix: the router image is evaluated with the real stack only";
  };
in
import ../image.nix {
  inherit pkgs lib stack revision;
}
// {
  inherit stack sglang wheel;
}
