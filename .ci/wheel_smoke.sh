#!/usr/bin/env bash
# The package as a user installs it: build the wheel from the working tree (what git tracks or would
# track, copied aside so no stale build/ output can ship), install it NOT editable, with its declared
# core dependencies, into a fresh venv, and run .ci/wheel_smoke.py from a directory outside the
# repository (make an env, check it, step it, score a group with a reward module, the `toolgym` script).
# constraints-cpu.txt keeps torch the CPU build should a dependency ask for it; pip's wheel cache is reused.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
PYTHON="${PYTHON:-python3}"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
start=$SECONDS

mkdir "$WORK/src"
(cd "$ROOT" && git ls-files -z --cached --others --exclude-standard | while IFS= read -r -d '' f; do
    [ -e "$f" ] && printf '%s\0' "$f"; done | tar --null -T - -cf - | tar -xf - -C "$WORK/src")
"$PYTHON" -m venv "$WORK/venv"
"$WORK/venv/bin/python" -m pip wheel -q --no-deps -w "$WORK/dist" "$WORK/src"
wheel=("$WORK"/dist/toolgym-*.whl)
built=$SECONDS
"$WORK/venv/bin/python" -m pip install -q "${wheel[0]}" -c "$ROOT/constraints-cpu.txt"
installed=$SECONDS

mkdir "$WORK/outside" && cp "$ROOT/.ci/wheel_smoke.py" "$WORK/outside/"
(cd "$WORK/outside" && OMP_NUM_THREADS=1 "$WORK/venv/bin/python" wheel_smoke.py)
echo "wheel smoke: build $((built - start)) s, install $((installed - built)) s, smoke $((SECONDS - installed)) s"
