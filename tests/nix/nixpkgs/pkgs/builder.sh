# The stand-in stdenv's builder (bash -e builder.sh), a small subset of nixpkgs'
# pkgs/stdenv/generic/setup.sh: the `bin` directories of the inputs go on PATH, with the
# outputs an input propagates (nix-support/propagated-build-inputs, one level), then
# stdenv's initial path; `buildCommand` (as runCommand and the trivial builders pass it,
# also via passAsFile) is run.
# Derivations that need nixpkgs' phases (unpack, configure, build, install hooks)
# cannot be built by the stand-in: it says so and fails.
#
# stdenv's initial path is what pkgs/stdenv/generic/common-path.nix lists (coreutils,
# findutils, diffutils, gnused, gnugrep, gawk, gnutar, gzip, bzip2.bin, gnumake, bash,
# patch, xz.bin, file; NixOS/nixpkgs@3813588): here the host's copies of those packages'
# programs, linked into one directory, and nothing else of the host. A program outside it
# (promtool, jq, python3, ...) is found only when the derivation names its package as an
# input, as in a real build.
initial_path_programs="
  [ b2sum base32 base64 basename basenc cat chcon chgrp chmod chown chroot cksum comm cp
  csplit cut date dd df dir dircolors dirname du echo env expand expr factor false fmt fold
  groups head hostid id install join link ln logname ls md5sum mkdir mkfifo mknod mktemp mv
  nice nl nohup nproc numfmt od paste pathchk pinky pr printenv printf ptx pwd readlink
  realpath rm rmdir runcon seq sha1sum sha224sum sha256sum sha384sum sha512sum shred shuf
  sleep sort split stat stdbuf stty sum sync tac tail tee test timeout touch tr true truncate
  tsort tty uname unexpand uniq unlink users vdir wc who whoami yes
  find xargs
  cmp diff diff3 sdiff
  sed
  grep egrep fgrep
  awk gawk
  tar
  gzip gunzip zcat zcmp zdiff zgrep zless zmore
  bzip2 bunzip2 bzcat
  make
  bash sh
  patch
  xz unxz xzcat lzma unlzma lzcat
  file"
PATH=/usr/local/bin:/usr/bin:/bin  # the host, only to assemble the initial path
initial_path=${TMPDIR:-/tmp}/.stdenv-initial-path
mkdir -p "$initial_path"
found=()
for program in $initial_path_programs; do
  for dir in /usr/local/bin /usr/bin /bin; do
    if [ -x "$dir/$program" ]; then
      found+=("$dir/$program")
      break
    fi
  done
done
ln -sf -t "$initial_path" -- "${found[@]}"  # one process, not one a program (138 cost 0.15 CPU-seconds a build)

PATH=
for input in $nativeBuildInputs $buildInputs $propagatedBuildInputs; do
  # An input's propagated outputs (a `dev` output propagates `bin`), as setup.sh finds them.
  propagated=
  if [ -f "$input/nix-support/propagated-build-inputs" ]; then propagated=$(<"$input/nix-support/propagated-build-inputs"); fi
  for dir in "$input" $propagated; do
    if [ -d "$dir/bin" ]; then PATH="${PATH:+$PATH:}$dir/bin"; fi
  done
done
export PATH="${PATH:+$PATH:}$initial_path"
export HOME=/homeless-shelter TMPDIR=${TMPDIR:-/tmp}
cd "$TMPDIR"
if [ -n "${buildCommandPath:-}" ]; then
  source "$buildCommandPath"
elif [ -n "${buildCommand:-}" ]; then
  eval "$buildCommand"
else
  echo "nixpkgs stand-in: $name needs nixpkgs' generic builder (phases); it can only be evaluated here" >&2
  exit 1
fi
