#!/usr/bin/env bash
# The main job: installs what is missing, builds, and shows what the example op info files hold and
# which ops would be compiled.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
if [ ! -f build/gcc/build.ninja ]; then
  CXX=g++ meson setup build/gcc -Dbenchmarks=enabled
fi
meson compile -C build/gcc
./build/gcc/tools/skc ops inspect examples/op_info "$@"
