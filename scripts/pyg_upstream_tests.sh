#!/usr/bin/env bash
# PyG's own tests of nn (aggr and pool included) and utils, with torchplug's
# PyG backend off and then on; every test that passes off must pass on.
#
#   scripts/pyg_upstream_tests.sh PYG_TEST_DIR OUT_DIR [PYTEST_ARGS...]
#
# PYG_TEST_DIR is the test/ folder of a PyG source tree at the installed
# version (git archive 2.8.0 test | tar -x); PYG_TESTS (default "nn utils")
# names its folders to run. torchplug must be importable
# (PYTHONPATH=$PWD/build/install: absolute, the runs start in PYG_TEST_DIR/..).
# OUT_DIR gets both JUnit reports, both logs and compare.txt.
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TESTS="$(cd "${1:?usage: scripts/pyg_upstream_tests.sh PYG_TEST_DIR OUT_DIR [PYTEST_ARGS...]}" && pwd)"
OUT="$(mkdir -p "${2:?OUT_DIR}" && cd "$2" && pwd)"
shift 2
export PYTHONPATH="$ROOT/tests/pyg_upstream${PYTHONPATH:+:$PYTHONPATH}"
# Some of PyG's parameters come from sets: one hash seed gives every pytest-xdist
# worker the same test list.
export PYTHONHASHSEED=0
read -ra folders <<< "${PYG_TESTS:-nn utils}"
folders=("${folders[@]/#/test/}")
for mode in off on; do
  plugin=(); [[ $mode == on ]] && plugin=(-p backend_on)
  # PyG's settings and conftest.py only: none of this tree's (-c, --confcutdir).
  (cd "$TESTS/.." && python3 -m pytest -q -c /dev/null --rootdir . --confcutdir . -p no:cacheprovider \
    "${plugin[@]}" --junitxml="$OUT/$mode.xml" "$@" "${folders[@]}" > "$OUT/$mode.log" 2>&1)
  tail -n 1 "$OUT/$mode.log"
done
python3 "$ROOT/tests/pyg_upstream/compare.py" "$OUT/off.xml" "$OUT/on.xml" | tee "$OUT/compare.txt"
