# Stand-in for CPython 3.12 (pkgs/development/interpreters/python/cpython/default.nix and
# passthru-fun.nix): the passthru attributes uv2nix, pyproject.nix and this flake read
# (sitePackages, interpreter, executable, pythonVersion, sourceVersion, implementation,
# pythonOnBuildForHost, withPackages, pkgs, stdenv, ...). Building it links the host's
# Python (which may be another minor version: only version-independent tools, like
# `python -m wheel`, may be run through it here).
{
  lib,
  stdenv,
  hostTool,
}:
let
  sourceVersion = {
    major = "3";
    minor = "12";
    patch = "12";
    suffix = "";
  };
  pythonVersion = "${sourceVersion.major}.${sourceVersion.minor}";
  version = "${pythonVersion}.${sourceVersion.patch}";
  executable = "python${pythonVersion}";

  # A python package of the interpreter's set (pkgs/development/python-modules/<name>).
  pythonPackage =
    pname: version:
    stdenv.mkDerivation {
      pname = "python${pythonVersion}-${pname}";
      inherit version;
      passthru = {
        pname = pname;
        inherit pythonModule;
      };
      buildCommand = "mkdir -p $out";
    };
  pythonModule = python;

  pythonPackages = lib.makeScope (extra: lib.callPackageWith (pythonPackages // extra)) (self: {
    python = python;
    # pkgs/development/python-modules/wheel (the `wheel` command and `python -m wheel`).
    wheel = pythonPackage "wheel" "0.45.1";
    pip = pythonPackage "pip" "25.0.1";
    setuptools = pythonPackage "setuptools" "80.9.0";
  });

  # pkgs/development/interpreters/python/wrapper.nix via with-packages.nix: an
  # environment with the interpreter and the chosen packages.
  withPackages =
    f:
    let
      extraLibs = f pythonPackages;
    in
    (hostTool "${python.name}-env" version [
      "python"
      "python3"
      executable
    ])
    // {
      passthru = { inherit extraLibs; };
      inherit extraLibs;
      interpreter = "${python}/bin/${executable}";
    };

  python =
    (hostTool "python3" version [
      "python"
      "python3"
      executable
    ]).overrideAttrs
      (old: {
        pname = "python3";
        meta = (old.meta or { }) // {
          mainProgram = "python3";
          platforms = lib.platforms.linux ++ lib.platforms.darwin;
        };
        passthru = (old.passthru or { }) // {
          inherit
            executable
            pythonVersion
            sourceVersion
            stdenv
            withPackages
            ;
          implementation = "cpython";
          libPrefix = executable;
          sitePackages = "lib/${executable}/site-packages";
          interpreter = "${python}/bin/${executable}";
          isPy3k = true;
          isPy3 = true;
          isPy27 = false;
          pythonAtLeast = lib.versionAtLeast pythonVersion;
          pythonOlder = lib.versionOlder pythonVersion;
          pkgs = pythonPackages;
          pythonOnBuildForHost = python;
          pythonOnBuildForBuild = python;
          pythonOnHostForHost = python;
          pythonOnTargetForTarget = python;
          buildEnv = withPackages;
        };
      });
in
python
