#!/usr/bin/env bash
# Builds skc and runs every test once, at warning_level=3 with werror:
#   1. g++, unoptimised, builds what its tests run and runs the tests that are not in suite
#      'sanitized': the areas whose time goes to the real kernel compiler they run (faults, skc
#      compile, the demo), the PyTorch plugin's tests (clang++ cannot compile libtorch's headers), MPI,
#      the examples, the layout, fwd.hpp and the installed packages;
#   2. clang++ under AddressSanitizer + UndefinedBehaviorSanitizer (unoptimised, line tables for the
#      reports' stacks) builds what its tests run and runs suite 'sanitized': every other test area,
#      the header and compile-fail checks;
#   3. the tests that run threads (suite 'threads') once more under ThreadSanitizer, building only
#      their executables;
#   4. every fuzz harness of tests/fuzz for a few seconds, two at a time.
# Each of the first two also runs suite 'syntax': every translation unit its build did not compile
# (in the g++ build the test executables that only the sanitizers run, their workers and the
# benchmarks; in the clang++ build the examples, tools and tests that only g++ runs) is
# syntax-checked with that compiler, so every one of them stays warning-free on both. Later
# configurations are built in the background at the lowest CPU priority (background below), so that
# they take the core a test leaves idle: the ASan+UBSan one while the g++ suite's tests that run
# alone (suite 'alone') run, the ThreadSanitizer one and the fuzz harnesses while the ASan+UBSan
# suite runs. Ends with one line "N passed, N failed".
#
# `bash scripts/test.sh quick`: the edit-compile-test loop. Suite 'quick' (the library's test areas
# that start no program) of an unoptimised g++ build in build/quick, building only its executables.
set -euo pipefail
cd "$(dirname "$0")/.."
quick=false
case "${1:-}" in
  quick) quick=true ;;
  "") ;;
  *) echo "usage: bash scripts/test.sh [quick]" >&2; exit 2 ;;
esac
bash scripts/install-deps.sh

passed=0
failed=0
status=0

# configure NAME COMPILER [meson options...]: set up build/NAME, or reconfigure it (a build directory
# of an older script).
configure() {
  local name=$1 compiler=$2
  shift 2
  if [ ! -f "build/$name/build.ninja" ]; then
    CXX=$compiler meson setup "build/$name" "$@"
  else
    meson configure "build/$name" "$@" >/dev/null
  fi
  mkdir -p "build/$name/meson-logs"
}

# background LOG COMMAND...: runs COMMAND in the background at the lowest CPU priority, its output
# to LOG; its process group's id is in $! (the group is killed if this script ends first). Linux
# shares the CPU between sessions (autogroups) before it looks at a process's nice value, and meson
# test starts each test in a session of its own, so `nice` alone would give the build an equal share
# with every test; the command gets a session of its own, and that session's autogroup nice 19.
background_groups=()
background() {
  local log=$1
  shift
  setsid -w bash -c '{ echo 19 >/proc/self/autogroup; } 2>/dev/null; exec nice -n 19 "$@"' _ "$@" >"$log" 2>&1 &
  background_groups+=("$!")
}
trap 'for g in "${background_groups[@]}"; do kill -- "-$g" 2>/dev/null || true; done' EXIT

# prebuild NAME [meson test suite options...]: builds in the background what those tests of
# build/NAME need (scripts/test_targets.py), into build/NAME/meson-logs/prebuild.log. A prebuild
# that fails does no harm: meson test builds again, in the foreground, where the errors show.
prebuild() {
  local dir=build/$1
  shift
  local targets
  targets=$(python3 scripts/test_targets.py "$dir" "$@")
  # shellcheck disable=SC2086 # one target per word
  background "$dir/meson-logs/prebuild.log" ninja -C "$dir" -j 2 $targets
}

# run_suite NAME PART [meson test options...]: runs the tests the options select in build/NAME
# (meson test builds what they need first, and nothing else), logged as meson-logs/testlog-PART.*,
# and adds up the results.
run_suite() {
  local name=$1 part=$2
  shift 2
  local dir=build/$name
  local log=$dir/meson-logs/suite-summary-$part.txt
  if meson test -C "$dir" --print-errorlogs --num-processes 2 --logbase "testlog-$part" "$@" | tee "$log"; then :; else
    status=1
  fi
  local ok fail
  ok=$(awk '/^Ok:/ {print $2}' "$log")
  fail=$(awk '/^(Fail|Timeout|Unexpected Pass):/ {s += $NF} END {print s + 0}' "$log")
  if [ -z "$ok" ]; then
    fail=$((fail + 1))  # no summary: the build of the selected tests failed
  fi
  passed=$((passed + ${ok:-0}))
  failed=$((failed + ${fail:-0}))
  echo "== $name ($part): ${ok:-0} passed, ${fail:-0} failed"
}

if $quick; then
  configure quick g++ -Dbenchmarks=disabled -Doptimization=0 -Ddebug=false
  run_suite quick quick --suite quick
  echo "$passed passed, $failed failed"
  exit $status
fi

sanitized_tests=(--suite sanitized --suite syntax)
configure gcc g++ -Dbenchmarks=enabled -Doptimization=0 -Ddebug=false
configure clang-sanitize clang++ -Dbenchmarks=disabled -Db_sanitize=address,undefined -Db_lundef=false \
  -Doptimization=0 -Ddebug=false -Dcpp_args=-gline-tables-only
configure tsan clang++ -Dbenchmarks=disabled -Db_sanitize=thread -Db_lundef=false -Doptimization=0 -Ddebug=false \
  -Dcpp_args=-gline-tables-only
mkdir -p build/fuzz

# The g++ suite's tests that run alone leave a core idle: the ASan+UBSan build starts beside them
# (beside the others it slowed them by more than it gained: 646 s instead of 555 for the g++ suite).
run_suite gcc main --no-suite sanitized --no-suite alone
prebuild clang-sanitize "${sanitized_tests[@]}"
clang_prebuild=$!
run_suite gcc alone --no-suite sanitized --suite alone
wait "$clang_prebuild" || true

# The ThreadSanitizer build and the fuzz harnesses build beside the ASan+UBSan suite (which they
# slow by about 26 s; they took 170 s in the foreground). (Running the harnesses beside its tests
# that run alone too slowed those by more than it saved.)
prebuild tsan --suite threads
tsan_prebuild=$!
background build/fuzz/build.log env FUZZ_STEP=build bash tests/fuzz/run.sh build/fuzz
fuzz_prebuild=$!
run_suite clang-sanitize main "${sanitized_tests[@]}"
wait "$tsan_prebuild" || true
TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" run_suite tsan main --suite threads

# The fuzz harnesses (tests/fuzz): each over its seed corpus, then 5 s of fuzzing; one count each.
fuzz_log=build/fuzz/summary.txt
fuzz_step=run
wait "$fuzz_prebuild" || fuzz_step=all  # the build failed: build again here, where its errors show
if FUZZ_STEP=$fuzz_step bash tests/fuzz/run.sh build/fuzz 5 | tee "$fuzz_log"; then :; else status=1; fi
fuzz_ok=$(grep -c '^fuzz .*, ok$' "$fuzz_log" || true)
fuzz_fail=$(grep -c '^fuzz .*FAILED' "$fuzz_log" || true)
if [ "$fuzz_ok" -eq 0 ] && [ "$fuzz_fail" -eq 0 ]; then
  fuzz_fail=1  # no line at all: the runner itself failed
fi
passed=$((passed + fuzz_ok))
failed=$((failed + fuzz_fail))
echo "== fuzz: $fuzz_ok passed, $fuzz_fail failed"

# The failures again at the very end, each with the last lines it printed, so that the tail of a
# long log says what failed and why.
for log in build/*/meson-logs/testlog-*.json; do
  [ -f "$log" ] || continue
  python3 - "$log" <<'PY'
import json, sys
path = sys.argv[1]
for line in open(path, encoding="utf-8", errors="replace"):
    t = json.loads(line)
    if t["result"] in ("OK", "SKIP", "EXPECTEDFAIL"):
        continue
    build = path.split("/")[1]
    print(f"== FAILED in {build}: {t['name']} ({t['result']}, exit {t['returncode']}, {t['duration']:.1f} s); its last lines:")
    for out in (t.get("stdout") or "").splitlines()[-40:]:
        print("   | " + out)
PY
done
grep -h 'FAILED' "$fuzz_log" || true

echo "$passed passed, $failed failed"
exit $status
