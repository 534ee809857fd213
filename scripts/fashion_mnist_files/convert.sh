#!/usr/bin/env bash
# Writes Fashion-MNIST as PNG class folders, CSV and 4 TFRecord shards under OUT (convert.js):
#   scripts/fashion_mnist_files/convert.sh OUT [IDX_DIR]
# Needs node and npm (scripts/setup --fixtures); the npm packages go to a scratch directory.
set -euo pipefail
out=$(realpath -m "$1")
src=${2:-/usr/share/datasets/fashion-mnist}
here=$(cd "$(dirname "$0")" && pwd)
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
cp "$here/../../tests/data/fixtures/package.json" "$here/../../tests/data/fixtures/package-lock.json" \
   "$here/convert.js" "$scratch/"
(cd "$scratch" && npm ci --silent --no-audit --no-fund && node convert.js "$src" "$out")
