#!/usr/bin/env bash
# Everything that needs the GPU, in one call on a GPU machine without a
# package registry (how the H200 figures in docs/ are taken):
#
#   scripts/gpu_check.sh OUT_DIR [tests|bench|sanitize|all]
#
# Builds with CUDA and the test suites (GoogleTest from .deps/googletest when
# the machine has none), then runs ctest, pytest (CUDA cases included), the GCN
# example on CUDA, every CUDA case again with the scatter CSR for every size,
# compute-sanitizer (memcheck, racecheck, initcheck) over
# tests/cuda_sanitizer_workload.py with either scatter path, the benchmark harness and the per-kernel
# breakdown (scripts/kernel_breakdown.py). The benchmark's table, JSON and plot
# and the breakdown land in OUT_DIR; every log in OUT_DIR/logs.tar.gz.
# TORCHPLUG_SHARD=i/n in the environment runs the i-th of n shards of every
# pytest run (conftest.py): the whole suite in n calls where one call has a
# time limit (on 8 workers it takes more than 10 minutes on the H200).
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="${1:?usage: scripts/gpu_check.sh OUT_DIR [tests|bench|sanitize|all]}"
WHAT="${2:-all}"
LOGS="$OUT/logs"
mkdir -p "$LOGS"
export TORCHPLUG_SKIP_DEPS=1 PYTHONUNBUFFERED=1
if [[ -d "$ROOT/.deps/googletest" ]]; then
  export TORCHPLUG_CMAKE_ARGS="-DTORCHPLUG_GTEST_SOURCE_DIR=$ROOT/.deps/googletest ${TORCHPLUG_CMAKE_ARGS:-}"
fi
status=0
run() { "$@" || status=1; }

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
"$ROOT/scripts/dev.sh" build ON > "$LOGS/build.log" 2>&1 || { tail -40 "$LOGS/build.log"; exit 1; }
export PYTHONPATH="$ROOT/build/install"

if [[ "$WHAT" == tests || "$WHAT" == all ]]; then
  run ctest --test-dir "$ROOT/build" --output-on-failure -j 8 > "$LOGS/ctest.log" 2>&1
  grep -E "tests passed|FAILED|Failed" "$LOGS/ctest.log" | tail -5
  # Serially the suite takes about 13 minutes on the H200: pytest-xdist
  # spreads it over 8 workers (a machine without a package index can install
  # wheels carried in .deps/wheels). Verbose, so that a run cut short still
  # names its failures; the 40 GB tests (large_memory) one at a time after.
  if ! python3 -c "import xdist" 2>/dev/null && compgen -G "$ROOT/.deps/wheels/*.whl" > /dev/null; then
    pip install -q --no-index --no-deps "$ROOT"/.deps/wheels/*.whl > /dev/null 2>&1
  fi
  parallel=()
  python3 -c "import xdist" 2>/dev/null && parallel=(-n 8)
  (cd "$ROOT" && env -u TORCHPLUG_SCATTER_ATOMIC_LIMIT python3 -m pytest -v -p no:cacheprovider \
    "${parallel[@]}" -m "not large_memory" > "$LOGS/pytest.log" 2>&1) || status=1
  (cd "$ROOT" && env -u TORCHPLUG_SCATTER_ATOMIC_LIMIT python3 -m pytest -v -p no:cacheprovider -m large_memory \
    > "$LOGS/pytest-large.log" 2>&1) || status=1
  grep -hE "FAILED|ERROR|passed|failed" "$LOGS/pytest.log" "$LOGS/pytest-large.log" | tail -25
  # Every CUDA case again with the CSR for every size (small scatters
  # otherwise take the atomic rows), less the 40 GB tests.
  (cd "$ROOT" && TORCHPLUG_SCATTER_ATOMIC_LIMIT=0 python3 -m pytest -v -p no:cacheprovider \
    "${parallel[@]}" -k cuda -m "not large_memory" ops tests/python \
    > "$LOGS/pytest-csr.log" 2>&1) || status=1
  grep -E "FAILED|ERROR|passed|failed" "$LOGS/pytest-csr.log" | tail -15
  run python3 "$ROOT/examples/gcn.py" --device cuda > "$LOGS/gcn.log" 2>&1
  tail -1 "$LOGS/gcn.log"
fi
if [[ "$WHAT" == sanitize || "$WHAT" == all ]]; then
  # Twice: small scatters take the atomic rows by default, the CSR with limit 0.
  for limit in default 0; do
    setting=(-u TORCHPLUG_SCATTER_ATOMIC_LIMIT)
    [[ "$limit" == 0 ]] && setting=(TORCHPLUG_SCATTER_ATOMIC_LIMIT=0)
    for tool in memcheck racecheck initcheck; do
      log="$LOGS/$tool-limit-$limit.log"
      run env "${setting[@]}" compute-sanitizer --tool "$tool" --error-exitcode 1 \
        python3 "$ROOT/tests/cuda_sanitizer_workload.py" > "$log" 2>&1
      echo "$tool (atomic limit $limit): $(tail -1 "$log")"
    done
  done
fi
if [[ "$WHAT" == bench || "$WHAT" == all ]]; then
  run python3 -m torchplug.bench --device cuda --json "$OUT/bench-cuda.json" \
    --plot "$OUT/bench-cuda.png" > "$OUT/bench.txt" 2> "$LOGS/bench.err"
  cat "$OUT/bench.txt"
  run python3 "$ROOT/scripts/kernel_breakdown.py" > "$OUT/breakdown.txt" 2>> "$LOGS/bench.err"
  cat "$OUT/breakdown.txt"
fi
tar -C "$OUT" -czf "$OUT/logs.tar.gz" logs && rm -rf "$LOGS"
exit $status
