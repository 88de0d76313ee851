# The size of a package's run-time closure by component (CUDA redistributables, Python
# wheels, nixpkgs packages): $out/closure-size.txt and $out/closure-size.json, written by
# scripts/closure-report.py from closureInfo's registration. nix build .#closure-size
{
  runCommand,
  closureInfo,
  python3,
}:
root:
runCommand "${root.name}-closure-size"
  {
    nativeBuildInputs = [ python3 ];
    closure = closureInfo { rootPaths = [ root ]; };
  }
  ''
    python3 ${./scripts/closure-report.py} $closure/registration $out
    cat $out/closure-size.txt
  ''
