#!/usr/bin/env bash
# One entry point for a fresh machine: installs what is missing, builds with
# CMake into build/, and runs the GCN example or every test.
#
#   scripts/dev.sh gcn [args...]   train examples/gcn.py on the karate club
#   scripts/dev.sh test            ctest (GoogleTest suites, C++ consumer) + pytest, then sanitize
#   scripts/dev.sh sanitize        the GoogleTest suites built with ASan + UBSan into build-asan/
#   scripts/dev.sh build           configure, build and install into build/install
#
# TORCHPLUG_SKIP_DEPS=1 skips the package installs (machines without a registry).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${TORCHPLUG_BUILD_DIR:-$ROOT/build}"
ASAN_BUILD="${TORCHPLUG_ASAN_BUILD_DIR:-$ROOT/build-asan}"
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

# The CPU GoogleTest suites under AddressSanitizer (with LeakSanitizer) and
# UndefinedBehaviorSanitizer; any report fails the test. Only the test
# executables and the libraries they link are built; cpp_consumer (label
# `install`) needs an install and is left out. Why each option: docs/reliability.md.
sanitize() {
  local generator=()
  [[ -f "$ASAN_BUILD/CMakeCache.txt" ]] || generator=(-G Ninja)
  cmake -S "$ROOT" -B "$ASAN_BUILD" "${generator[@]}" \
    -DPython3_EXECUTABLE="$(command -v "$PYTHON")" ${TORCHPLUG_CMAKE_ARGS:-} \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTORCHPLUG_SANITIZE=ON -DTORCHPLUG_WITH_CUDA=OFF \
    -DTORCHPLUG_BUILD_TESTS=ON -DTORCHPLUG_BUILD_PYTHON=OFF
  cmake --build "$ASAN_BUILD" --target torchplug_tests -j "$JOBS"
  # Options set here come first, so ASAN_OPTIONS/UBSAN_OPTIONS from the
  # environment can add to them. CUDA_VISIBLE_DEVICES is emptied: this build
  # has no CUDA kernels (the CUDA cases skip anyway), and initialising the
  # uninstrumented CUDA driver on a GPU would need protect_shadow_gap=0;
  # hidden GPUs make the run the same on CPU CI and the GPU machine.
  ASAN_OPTIONS="detect_leaks=1:detect_stack_use_after_return=1:check_initialization_order=1:strict_init_order=1${ASAN_OPTIONS:+:$ASAN_OPTIONS}" \
  UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}" \
  CUDA_VISIBLE_DEVICES="" \
    ctest --test-dir "$ASAN_BUILD" -LE install --output-on-failure -j "$JOBS"
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
    sanitize
    ;;
  sanitize)
    deps tests
    sanitize
    ;;
  build)
    deps
    build "${2:-OFF}"
    ;;
  *)
    echo "usage: scripts/dev.sh gcn [args...] | test | sanitize | build [ON|OFF]" >&2
    exit 2
    ;;
esac
