#!/usr/bin/env bash
# The main job: installs what is missing, builds the demo, and runs it twice on one output base.
# The first run records a transformer block's ops, compiles them into static kernels with the
# reference CPU backend (unless an earlier run of this script cached them), installs and reselects
# them, checks the outputs and times both kernel kinds; the second run finds the package in the
# cache and compiles nothing. Extra arguments go to both runs (see skc_demo --help).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
if [ ! -f build/gcc/build.ninja ]; then
  CXX=g++ meson setup build/gcc -Dbenchmarks=enabled -Ddebug=false
fi
# Targets by path: the Python package (python/skc_torch) has a copy named host_op_compiler too.
targets=(examples/demo/skc_demo examples/host/host_op_compiler tools/skc)
# The PyTorch plugin (examples/torch), when libtorch is installed: see docs/torch.md.
if meson introspect build/gcc --targets | grep -q '"name": "skc_torch"'; then targets+=(examples/torch/skc_torch); fi
meson compile -C build/gcc "${targets[@]}"
base=build/demo-base
mkdir -p "$base"
echo "== first run"
./build/gcc/examples/demo/skc_demo --base "$base" "$@"
echo
echo "== second run: the same ops, so the cache has the package"
./build/gcc/examples/demo/skc_demo --base "$base" "$@"
