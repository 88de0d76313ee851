# The SGLang patch series of one SGLang version: exactly the files listed in
# patches/sglang-<version>/series, in order, the same list the Python patch tool applies.
# Builtins only: `import ./patch-series.nix "0.5.9"`.
version:
let
  dir = ../patches + "/sglang-${version}";
  series = dir + "/series";
  text =
    if builtins.pathExists series then
      builtins.readFile series
    else
      throw "patches/sglang-${version}/series does not exist: a pinned stack needs its patch series (an empty one, comments only, applies nothing)";
  lines = builtins.filter builtins.isString (builtins.split "\n" text);
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
  # The same flags as sglang_eagle3.trees.patchset.PATCH_FLAGS (a test keeps them equal):
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
