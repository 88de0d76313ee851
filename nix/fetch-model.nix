# fetchModel { lockFile; }: a model directory in the Nix store, built from a model lock
# (`sglang-eagle3 models lock REPO@REV --output x.lock.json`). Each file is one
# fixed-output derivation, fetchurl of the hub's resolve URL at the locked commit checked
# against the file's sha256 from the lock; linkFarm joins them into the model directory.
# Meant for small models (the EAGLE-3 draft); a 600 GB target usually stays outside the
# store (services.sglang-eagle3.models fetches it into /var/lib).
#
# Every file's sha256 comes from the lock. For LFS files (the weights) it is the one the hub
# publishes. Files kept in git (config.json, tokenizer files, code) have only a git blob id
# on the hub: sha1 of "blob <size>\0" + content, which no fixed-output hash can check, so
# `models lock` downloads them, checks that id, and records their sha256.
#
# Gated and private repositories need a token, which a fixed-output fetch could only carry
# inside its derivation (world-readable in the store): they are refused here; use the
# NixOS module, which gives the token to its fetch unit with LoadCredential.
#
# Builtins only, besides the two functions passed in:
#   fetchModel = import ./nix/fetch-model.nix { inherit (pkgs) fetchurl linkFarm; };
{ fetchurl, linkFarm }:
{
  lockFile,
  endpoint ? "https://huggingface.co",
  name ? null,
}:
let
  lock = builtins.fromJSON (builtins.readFile lockFile);
  fail = message: throw "fetchModel ${toString lockFile}: ${message}";
  chars = s: builtins.genList (i: builtins.substring i 1 s) (builtins.stringLength s);

  # Store path names allow A-Z a-z 0-9 + - . _ ? = and do not start with a dot.
  storeName =
    s:
    let
      safe = builtins.concatStringsSep "" (
        map (c: if builtins.match "[A-Za-z0-9+._?=-]" c != null then c else "-") (chars s)
      );
    in
    builtins.substring 0 200 (if builtins.substring 0 1 safe == "." then "dot${safe}" else safe);

  # Percent-encoding of a path, as huggingface_hub's hf_hub_url does (urllib's quote, "/" kept).
  escapes = {
    " " = "%20";
    "!" = "%21";
    "\"" = "%22";
    "#" = "%23";
    "$" = "%24";
    "%" = "%25";
    "&" = "%26";
    "'" = "%27";
    "(" = "%28";
    ")" = "%29";
    "*" = "%2A";
    "+" = "%2B";
    "," = "%2C";
    ":" = "%3A";
    ";" = "%3B";
    "<" = "%3C";
    "=" = "%3D";
    ">" = "%3E";
    "?" = "%3F";
    "@" = "%40";
    "[" = "%5B";
    "]" = "%5D";
    "^" = "%5E";
    "`" = "%60";
    "{" = "%7B";
    "|" = "%7C";
    "}" = "%7D";
  };
  quote =
    path:
    builtins.concatStringsSep "" (
      map (
        c:
        if builtins.match "[A-Za-z0-9_.~/-]" c != null then
          c
        else
          escapes.${c} or (fail "${path}: only ASCII file names are supported")
      ) (chars path)
    );

  checked =
    if (lock.format or null) != "sglang-eagle3-model-lock" then
      fail "not a model lock; make one with `sglang-eagle3 models lock`"
    else if (lock.version or null) != 1 then
      fail "lock version ${builtins.toJSON (lock.version or null)} is not supported (this file reads 1)"
    else if builtins.match "[0-9a-f]{40}" (lock.commit or "") == null then
      fail "commit ${builtins.toJSON (lock.commit or null)} is not a 40-hex commit"
    else if (lock.gated or false) || (lock.private or false) then
      fail "${lock.repo} is gated or private: a fixed-output fetch would need the token in the store; use services.sglang-eagle3.models (token via LoadCredential) instead"
    else if (lock.files or [ ]) == [ ] then
      fail "the lock lists no files"
    else
      lock;

  fetchFile =
    file:
    if builtins.match "[0-9a-f]{64}" (file.sha256 or "") == null then
      fail "${file.path or "a file"} has no sha256; make the lock again with `sglang-eagle3 models lock`"
    else
      {
        name = file.path;
        path = fetchurl {
          name = storeName file.path;
          url = "${endpoint}/${checked.repo}/resolve/${checked.commit}/${quote file.path}";
          inherit (file) sha256;
        };
      };
in
linkFarm (
  if name != null then name else storeName "${baseNameOf checked.repo}-${builtins.substring 0 12 checked.commit}"
) (map fetchFile checked.files)
