#!/usr/bin/env bash
# Builds examples/cpp against an installed torchplug, runs it, and checks that
# the program depends on the scatter plugin and not on the add plugin.
#
#   tests/cpp/run_consumer.sh <torchplug install prefix> <work dir>
set -euo pipefail

if [[ $# -ne 2 ]]; then
  echo "usage: $0 <torchplug install prefix> <work dir>" >&2
  exit 2
fi
prefix=$1
work=$2
example=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../examples/cpp" && pwd)
python=${PYTHON:-python3}

if [[ ! -f $prefix/lib/cmake/TorchPlug/TorchPlugConfig.cmake ]]; then
  echo "no installed torchplug under $prefix: run 'cmake --install <build dir>' first" >&2
  exit 1
fi
torch_prefix=$("$python" -c 'import torch; print(torch.utils.cmake_prefix_path)')

generator=()
if command -v ninja >/dev/null; then generator=(-G Ninja); fi
cmake --fresh -S "$example" -B "$work" "${generator[@]}" \
  -DCMAKE_PREFIX_PATH="$prefix;$torch_prefix"
cmake --build "$work"

program=$work/scatter_consumer
"$program"

needed=$(readelf -d "$program" | grep NEEDED)
echo "$needed"
if ! grep -q 'libtorchplug_scatter\.so' <<<"$needed"; then
  echo "FAILED: scatter_consumer does not need libtorchplug_scatter.so" >&2
  exit 1
fi
if grep -q 'libtorchplug_add\.so' <<<"$needed"; then
  echo "FAILED: scatter_consumer needs libtorchplug_add.so, but links only torchplug::scatter" >&2
  exit 1
fi
# Nor does anything it loads: the add plugin stays out of the process.
if ldd "$program" | grep -q 'libtorchplug_add\.so'; then
  echo "FAILED: libtorchplug_add.so is loaded with scatter_consumer" >&2
  exit 1
fi
echo "scatter_consumer links torchplug::scatter alone"
