#!/usr/bin/env bash
# The benchmark of an earlier tree and of this one, side by side on one
# machine (how docs/benchmarks.md's before/after tables are taken):
#
#   scripts/compare_builds.sh OLD_TREE OUT_DIR DEVICE [ROUNDS [BENCH_ARGS...]]
#
# OLD_TREE is a copy of the earlier sources (git archive REF | tar -x -C DIR).
# Both are built with scripts/dev.sh (no package installs); then the two
# builds' `python -m torchplug.bench --device DEVICE` run in turn, ROUNDS
# times each (default 2), so that drift of the machine hits both alike;
# BENCH_ARGS go to every bench run (--quick, say).
# OUT_DIR gets each run's JSON and table, and compare.md (scripts/compare_builds.py).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OLD="$(cd "${1:?usage: scripts/compare_builds.sh OLD_TREE OUT_DIR DEVICE [ROUNDS [BENCH_ARGS...]]}" && pwd)"
OUT="${2:?OUT_DIR}"
DEVICE="${3:?DEVICE (cpu or cuda)}"
ROUNDS="${4:-2}"
BENCH_ARGS=("${@:5}")
mkdir -p "$OUT"
export TORCHPLUG_SKIP_DEPS=1 PYTHONUNBUFFERED=1

for tree in "$ROOT" "$OLD"; do
  [[ -f "$tree/build/install/torchplug/__init__.py" ]] && continue
  "$tree/scripts/dev.sh" build > "$OUT/build-$(basename "$tree").log" 2>&1 \
    || { tail -30 "$OUT/build-$(basename "$tree").log"; exit 1; }
done

for round in $(seq "$ROUNDS"); do
  for build in before after; do
    tree="$ROOT"; [[ "$build" == before ]] && tree="$OLD"
    (cd "$OUT" && PYTHONPATH="$tree/build/install" python3 -m torchplug.bench --device "$DEVICE" "${BENCH_ARGS[@]}" \
      --json "$OUT/$build-$DEVICE-$round.json" > "$OUT/$build-$DEVICE-$round.txt")
  done
done
python3 "$ROOT/scripts/compare_builds.py" --before "$OUT"/before-"$DEVICE"-*.json \
  --after "$OUT"/after-"$DEVICE"-*.json | tee "$OUT/compare-$DEVICE.md"
