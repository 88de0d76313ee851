# Fix-ups on top of the uv.lock package set (a pyproject.nix overlay):
#   - torch, torchvision, sgl-kernel: the CUDA 13 wheels from nix/pins.json instead of
#     PyPI's CUDA 12 ones, linked against cudaPackages_13_0 by autoPatchelf; the pip
#     nvidia-*-cu12 libraries they would pull in are dropped from the closure;
#   - sglang: the wheel with the patch series applied (sglang-wheel.nix);
#   - sglang-eagle3: built with patches/ and nix/pins.json beside python/, which its
#     wheel includes.
{
  pkgs,
  lib,
  cuda,
  python,
  src,
}:
final: prev:
let
  pins = import ./pins.nix;
  sitePackages = python.sitePackages;
  withoutPipCuda = lib.filterAttrs (name: _: !(lib.hasPrefix "nvidia-" name));

  cudaWheel =
    pkg: pin: torchLibs:
    pkg.overrideAttrs (old: {
      src = pkgs.fetchurl (pins.fetchurlArgs pin);
      # uv2nix already runs autoPatchelf on wheels; this adds the driver's runpath.
      nativeBuildInputs = (old.nativeBuildInputs or [ ]) ++ [ pkgs.autoAddDriverRunpath ];
      buildInputs = (old.buildInputs or [ ]) ++ cuda.runtimeLibs;
      # The driver library is the host's, found at run time.
      autoPatchelfIgnoreMissingDeps = [ "libcuda.so.1" ];
      # libtorch*.so and friends live inside the torch wheel.
      preFixup = (old.preFixup or "") + lib.concatMapStrings (d: "addAutoPatchelfSearchPath ${d}\n") torchLibs;
      passthru = old.passthru // {
        dependencies = withoutPipCuda old.passthru.dependencies;
      };
    });

  torchLib = "${final.torch}/${sitePackages}/torch/lib";
in
{
  torch = cudaWheel prev.torch "torch" [ "$out/${sitePackages}/torch/lib" ];
  torchvision = cudaWheel prev.torchvision "torchvision" [ torchLib ];
  sgl-kernel = cudaWheel prev.sgl-kernel "sgl-kernel" [ torchLib ];

  sglang = prev.sglang.overrideAttrs (old: {
    src = pkgs.callPackage ./sglang-wheel.nix { inherit python; };
    passthru = old.passthru // {
      # Audio/video inputs only (torchaudio is imported by one audio model, which SGLang
      # skips when the import fails); their PyPI builds link CUDA 12.
      dependencies = removeAttrs (withoutPipCuda old.passthru.dependencies) [
        "torchaudio"
        "torchcodec"
        "decord2"
      ];
    };
  });

  sglang-eagle3 = prev.sglang-eagle3.overrideAttrs (_old: {
    src = lib.fileset.toSource {
      root = src;
      fileset = lib.fileset.unions [
        (src + "/python")
        (src + "/patches")
        (src + "/nix/pins.json")
      ];
    };
    sourceRoot = "source/python";
  });
}
