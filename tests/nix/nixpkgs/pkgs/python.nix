# Stand-in for CPython 3.x (pkgs/development/interpreters/python/cpython/default.nix and
# passthru-fun.nix): the passthru attributes uv2nix, pyproject.nix and this flake read
# (sitePackages, interpreter, executable, pythonVersion, sourceVersion, implementation,
# pythonOnBuildForHost, withPackages, pkgs, stdenv, ...). Building it links the host's
# Python (which may be another minor version: only version-independent tools, like
# `python -m wheel`, may be run through it here).
{
  lib,
  stdenv,
  hostTool,
  # python312 = { major = "3"; minor = "12"; patch = "12"; suffix = ""; } (the patch releases
  # are illustrative).
  sourceVersion,
}:
let
  pythonVersion = "${sourceVersion.major}.${sourceVersion.minor}";
  version = "${pythonVersion}.${sourceVersion.patch}";
  executable = "python${pythonVersion}";

  # A python package of the interpreter's set (pkgs/development/python-modules/<name>, built
  # by buildPythonPackage: mk-python-derivation.nix keeps the caller's extra attributes on the
  # derivation, so `pythonImportsCheck`, the modules nixpkgs' import check hook imports after
  # the build, can be read; `requiredPythonModules` lists the propagated Python dependencies).
  pythonPackage =
    pname: version: imports:
    stdenv.mkDerivation {
      pname = "python${pythonVersion}-${pname}";
      inherit version;
      pythonImportsCheck = imports;
      passthru = {
        pname = pname;
        inherit pythonModule;
        requiredPythonModules = [ ];
      };
      buildCommand = "mkdir -p $out";
    };
  pythonModule = python;

  pythonPackages = lib.makeScope (extra: lib.callPackageWith (pythonPackages // extra)) (self: {
    python = python;
    # pkgs/development/python-modules/wheel (the `wheel` command and `python -m wheel`).
    wheel = pythonPackage "wheel" "0.45.1" [ "wheel" ];
    pip = pythonPackage "pip" "25.0.1" [ "pip" ];
    setuptools = pythonPackage "setuptools" "80.9.0" [ "setuptools" ];
    # pkgs/development/python-modules/prometheus-client: the attribute name and
    # pythonImportsCheck = [ "prometheus_client" ] are the real ones, the version illustrative.
    prometheus-client = pythonPackage "prometheus-client" "0.23.1" [ "prometheus_client" ];
    # pkgs/development/python-modules/{click,pydantic}: what `sglang-eagle3` imports to start
    # (nix/tests/image-stand-in.nix); attribute names and pythonImportsCheck the real ones.
    click = pythonPackage "click" "8.3.1" [ "click" ];
    pydantic = pythonPackage "pydantic" "2.12.5" [ "pydantic" ];
  });

  # pkgs/development/interpreters/python/python-packages-base.nix: the interpreter, the
  # Python modules among `drvs` and their propagated Python modules.
  requiredPythonModules =
    drvs:
    let
      modules = lib.filter (d: d ? pythonModule) drvs;
    in
    lib.unique (
      [ python ] ++ modules ++ lib.concatLists (lib.catAttrs "requiredPythonModules" modules)
    );

  # pkgs/development/interpreters/python/wrapper.nix (`buildEnv`, overridable with
  # `extraLibs`; as python-packages-base.nix calls it, the result is the environment with
  # no extra package) over pkgs/build-support/buildenv/default.nix: an environment with the
  # interpreter and the chosen packages; `paths` (buildenv's passthru) is what it links,
  # `interpreter` its own python, the rest of the passthru is the interpreter's. Built here
  # as wrappers of the host's python (which has whatever modules the host has).
  buildEnv = lib.makeOverridable (
    {
      extraLibs ? [ ],
      ...
    }:
    let
      paths = requiredPythonModules extraLibs;
      env =
        (hostTool "${python.name}-env" version [
          "python"
          "python3"
          executable
        ]).overrideAttrs
          (old: {
            name = "${python.name}-env";
            passthru =
              (old.passthru or { })
              // python.passthru
              // {
                interpreter = "${env}/bin/${executable}";
                inherit python paths;
              };
          });
    in
    env
  ) { };

  # pkgs/development/interpreters/python/with-packages.nix
  withPackages = f: buildEnv.override { extraLibs = f pythonPackages; };

  python =
    (hostTool "python3" version [
      "python"
      "python3"
      executable
    ]).overrideAttrs
      (old: {
        pname = "python3";
        # The host's Python, whatever its minor version (see above): python3.12 is the host's python3, so a build
        # step run with `python.interpreter` runs here on a host without a python3.12.
        buildCommand = old.buildCommand + ''
          ln -sf python3 $out/bin/${executable}
        '';
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
            buildEnv
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
        };
      });
in
python
