#!/usr/bin/env bash
# Builds skc and runs every test suite two ways, both at warning_level=3 with werror: g++ (optimised,
# with the benchmarks built), and clang++ under AddressSanitizer + UndefinedBehaviorSanitizer (one
# build covers the second compiler and the sanitizers). Ends with one line "N passed, N failed".
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh

passed=0
failed=0
status=0

# configure NAME COMPILER [meson options...]: set up build/NAME once, reconfigure later runs.
run_suite() {
  local name=$1 compiler=$2
  shift 2
  local dir=build/$name
  if [ ! -f "$dir/build.ninja" ]; then
    CXX=$compiler meson setup "$dir" "$@"
  fi
  meson compile -C "$dir"
  local log=$dir/meson-logs/suite-summary.txt
  if meson test -C "$dir" --print-errorlogs --num-processes 2 | tee "$log"; then :; else status=1; fi
  local ok fail
  ok=$(awk '/^Ok:/ {print $2}' "$log")
  fail=$(awk '/^(Fail|Timeout|Unexpected Pass):/ {s += $NF} END {print s + 0}' "$log")
  passed=$((passed + ${ok:-0}))
  failed=$((failed + ${fail:-0}))
  echo "== $name: ${ok:-0} passed, ${fail:-0} failed"
}

run_suite gcc g++ -Dbenchmarks=enabled -Ddebug=false
run_suite clang-sanitize clang++ -Dbenchmarks=disabled -Db_sanitize=address,undefined -Db_lundef=false -Dbuildtype=debug

echo "$passed passed, $failed failed"
exit $status
