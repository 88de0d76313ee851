# Stand-in for fetchurl (pkgs/build-support/fetchurl/default.nix): the same arguments
# (every formal argument of the real one: `url` or `urls`, `name`, `hash` or `sha256` or
# `outputHash`/`outputHashAlgo`, `passthru`, `meta`, ...), the same name rule (the last component of the first URL, which
# Nix then validates as a store path name: a `%` from a percent-encoded URL fails, as it
# does with the real fetchurl), and the same fixed-output derivation (flat hash). As in
# nixpkgs, `curl` comes first in nativeBuildInputs (`nativeBuildInputs = [ curl ] ++
# nativeBuildInputs;`): the builder's PATH holds only its inputs and stdenv's initial path,
# so without it no download could run. (nixpkgs builds it with stdenvNoCC; the stand-in's one
# stdenv has no compiler to leave out.) A test that puts the file in the store first
# (`nix-store --add-fixed sha256 FILE`) makes the output valid, and the builder never runs:
# tests/run gives every run an empty store (tests/support/fresh-nix-store) so that cannot
# hide a builder that fails.
{
  lib,
  stdenv,
  curl,
}:
{
  url ? "",
  urls ? [ ],
  name ? "",
  hash ? "",
  sha256 ? "",
  outputHash ? "",
  outputHashAlgo ? "",
  sha1 ? "",
  sha512 ? "",
  recursiveHash ? false,
  # BASIC auth for the download (unused here: nothing this project fetches needs it).
  netrcPhase ? null,
  netrcImpureEnvVars ? [ ],
  executable ? false,
  curlOpts ? "",
  curlOptsList ? [ ],
  postFetch ? "",
  downloadToTemp ? false,
  showURLs ? false,
  pname ? null,
  version ? null,
  passthru ? { },
  meta ? { },
  preferLocalBuild ? true,
  nativeBuildInputs ? [ ],
  derivationArgs ? { },
}:
let
  urls' =
    if url != "" then
      assert lib.assertMsg (urls == [ ]) "fetchurl: only one of `url` and `urls` may be set";
      [ url ]
    else
      assert lib.assertMsg (urls != [ ]) "fetchurl: either `url` or `urls` must be set";
      urls;
  hashes = lib.filter (h: h != "") [
    hash
    sha1
    sha256
    sha512
    outputHash
  ];
  hash' =
    if builtins.length hashes == 1 then
      builtins.head hashes
    else if hashes == [ ] then
      throw "fetchurl requires a hash for fixed-output derivation: ${lib.concatStringsSep ", " urls'}"
    else
      throw "multiple hashes passed to fetchurl: ${lib.concatStringsSep ", " urls'}";
  algo =
    if outputHashAlgo != "" then
      outputHashAlgo
    else if sha256 != "" then
      "sha256"
    else if sha512 != "" then
      "sha512"
    else if sha1 != "" then
      "sha1"
    else
      "";
in
stdenv.mkDerivation (
{
  name =
    if pname != null && version != null then
      "${pname}-${version}"
    else if name != "" then
      name
    else
      baseNameOf (toString (builtins.head urls'));
  urls = urls';
  outputHash = hash';
  outputHashAlgo = algo;
  outputHashMode = if recursiveHash || executable then "recursive" else "flat";
  inherit
    executable
    preferLocalBuild
    curlOpts
    postFetch
    ;
  nativeBuildInputs = [ curl ] ++ nativeBuildInputs;
  buildCommand = ''
    for u in $urls; do
      curl --fail --location --silent --show-error --output "$out" "$u" && exit 0
    done
    exit 1
  '';
  passthru = passthru // {
    url = builtins.head urls';
  };
  inherit meta;
}
// derivationArgs
)
