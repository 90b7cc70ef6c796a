#!/usr/bin/env bash
# One entry point for a fresh machine: installs what is missing, builds with
# CMake into build/, and runs the GCN example or every test.
#
#   scripts/dev.sh gcn [args...]   train examples/gcn.py on the karate club
#   scripts/dev.sh test            ctest (GoogleTest suites, C++ consumer) + pytest
#   scripts/dev.sh build           configure, build and install into build/install
#
# TORCHPLUG_SKIP_DEPS=1 skips the package installs (machines without a registry).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${TORCHPLUG_BUILD_DIR:-$ROOT/build}"
PREFIX="$BUILD/install/torchplug"
PYTHON="${PYTHON:-python3}"
JOBS="$(nproc)"

deps() {
  [[ "${TORCHPLUG_SKIP_DEPS:-0}" == 1 ]] && return
  "$PYTHON" -m pip install --quiet --disable-pip-version-check -r "$ROOT/requirements.txt"
  if [[ "${1:-}" == tests ]] && ! ls /usr/src/googletest/CMakeLists.txt /usr/lib/*/cmake/GTest >/dev/null 2>&1; then
    apt-get update -qq && apt-get install -y -qq libgtest-dev
  fi
}

build() {
  local tests="${1:-OFF}"
  local generator=()
  [[ -f "$BUILD/CMakeCache.txt" ]] || generator=(-G Ninja)
  cmake -S "$ROOT" -B "$BUILD" "${generator[@]}" \
    -DPython3_EXECUTABLE="$(command -v "$PYTHON")" \
    -DTORCHPLUG_BUILD_PYTHON=ON -DTORCHPLUG_BUILD_TESTS="$tests" \
    -DCMAKE_INSTALL_PREFIX="$PREFIX" ${TORCHPLUG_CMAKE_ARGS:-}
  cmake --build "$BUILD" -j "$JOBS"
  cmake --install "$BUILD" >/dev/null
}

case "${1:-}" in
  gcn)
    shift
    deps
    build
    PYTHONPATH="$BUILD/install" "$PYTHON" "$ROOT/examples/gcn.py" "$@"
    ;;
  test)
    deps tests
    build ON
    ctest --test-dir "$BUILD" --output-on-failure -j "$JOBS"
    cd "$ROOT" && PYTHONPATH="$BUILD/install" "$PYTHON" -m pytest -q
    ;;
  build)
    deps
    build "${2:-OFF}"
    ;;
  *)
    echo "usage: scripts/dev.sh gcn [args...] | test | build [ON|OFF]" >&2
    exit 2
    ;;
esac
