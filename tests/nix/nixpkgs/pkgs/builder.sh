# The stand-in stdenv's builder (bash -e builder.sh), a small subset of nixpkgs'
# pkgs/stdenv/generic/setup.sh: the `bin` directories of the inputs go on PATH (host
# tools after them: the stand-in's leaf packages are links to them), with the outputs an
# input propagates (nix-support/propagated-build-inputs, one level), `buildCommand`
# (as runCommand and the trivial builders pass it, also via passAsFile) is run.
# Derivations that need nixpkgs' phases (unpack, configure, build, install hooks)
# cannot be built by the stand-in: it says so and fails.
PATH=
for input in $nativeBuildInputs $buildInputs $propagatedBuildInputs; do
  # An input's propagated outputs (a `dev` output propagates `bin`), as setup.sh finds them.
  propagated=
  if [ -f "$input/nix-support/propagated-build-inputs" ]; then propagated=$(<"$input/nix-support/propagated-build-inputs"); fi
  for dir in "$input" $propagated; do
    if [ -d "$dir/bin" ]; then PATH="${PATH:+$PATH:}$dir/bin"; fi
  done
done
export PATH="${PATH:+$PATH:}/usr/local/bin:/usr/bin:/bin"
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
