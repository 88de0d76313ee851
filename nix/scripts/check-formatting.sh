#!/usr/bin/env bash
# The formatting check of `nix flake check`: Python formatted and linted by ruff, every .nix
# file parses. (The .nix layout is nixfmt's, `nix fmt` applies it; it is not enforced here
# because nixfmt could not be run where this project is developed.)
#
#   check-formatting.sh SOURCE_DIR
#
# SOURCE_DIR may be read-only (in the Nix sandbox it is the flake's store path): ruff runs
# without its cache, and nix-instantiate gets a throw-away store and state directory, as
# nixpkgs' own ci/parse.nix does (without one it fails to open its database in the sandbox).
set -euo pipefail
src=${1:?usage: check-formatting.sh SOURCE_DIR}
cd "$src"
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT

ruff format --no-cache --check python tests benchmarks nix kubernetes
ruff check --no-cache python tests benchmarks nix kubernetes

export NIX_STORE_DIR=$scratch/store NIX_STATE_DIR=$scratch/state NIX_LOG_DIR=$scratch/log
export NIX_CONF_DIR=$scratch HOME=$scratch NIX_CONFIG="build-users-group ="
nix-store --init
mapfile -t nix_files < <(find . -name '*.nix' -not -path './.git/*' -not -path './.venv/*' | sort)
for f in "${nix_files[@]}"; do
  nix-instantiate --parse "$f" > /dev/null
done
echo "formatting: ok (${#nix_files[@]} .nix files parse; Python is ruff-clean)"
