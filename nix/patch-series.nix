# The SGLang patch series: exactly the files listed in patches/sglang-<version>/series,
# in order, the same list the Python patch tool applies. Builtins only.
let
  pins = import ./pins.nix;
  version = pins.artifacts.sglang.version;
  dir = ../patches + "/sglang-${version}";
  lines = builtins.filter builtins.isString (builtins.split "\n" (builtins.readFile (dir + "/series")));
  # "name.patch  # comment" -> "name.patch"; blank and comment-only lines -> null
  nameOf =
    line:
    let
      m = builtins.match "[[:space:]]*([^#[:space:]]+).*" line;
    in
    if m == null then null else builtins.head m;
  names = builtins.filter (n: n != null) (map nameOf lines);
in
{
  inherit version dir names;
  patches = map (n: dir + "/${n}") names;
  # The same flags as sglang_eagle3.source.patchset.PATCH_FLAGS (a test keeps them equal):
  # no fuzz, never guess that a patch is reversed, no backup or reject files.
  flags = [
    "-p1"
    "--fuzz=0"
    "--force"
    "--batch"
    "--no-backup-if-mismatch"
    "--reject-file=-"
  ];
}
