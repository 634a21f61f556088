#!/usr/bin/env bash
# Builds every libFuzzer harness in tests/fuzz/ and runs each over its seed corpus.
#
#   tests/fuzz/run.sh [OUTDIR] [SECONDS]
#
# OUTDIR (default build/fuzz in the repository) gets the harness binaries, a log per build and per
# run, and the inputs of any crash (artifacts/). Each harness runs for SECONDS seconds (default 5),
# two at a time, on a scratch copy of tests/fuzz/corpus/<harness>/, so the inputs it finds do not go
# into the repository. Exits non-zero when a build fails or a harness finds a crash.
#
# Environment: CXX (default clang++), FUZZ_BUILD_JOBS (harnesses built at once: 1 or 2, default 2),
# FUZZ_STEP (build: only build the harnesses; run: only run those built before; default both),
# TMPDIR (where the harnesses put their scratch files; default /dev/shm when it is usable, since
# some harnesses write through the library's fsync'd paths).
set -u -o pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
outdir=${1:-$repo/build/fuzz}
seconds=${2:-5}
cxx=${CXX:-clang++}
jobs=${FUZZ_BUILD_JOBS:-2}
[ "$jobs" -ge 1 ] 2>/dev/null || jobs=1
[ "$jobs" -le 2 ] || jobs=2

case $seconds in
'' | *[!0-9]*) echo "run.sh: SECONDS must be a whole number, not '$seconds'" >&2; exit 2 ;;
esac
mkdir -p "$outdir/artifacts" || exit 2
outdir=$(cd "$outdir" && pwd)

if [ -z "${TMPDIR:-}" ] && [ -d /dev/shm ] && [ -w /dev/shm ]; then
    export TMPDIR=/dev/shm
fi
# UBSan reports are errors: stop at the first one, as ASan does.
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}

flags=(-std=c++20 -fsanitize=fuzzer,address,undefined -O1 -gline-tables-only -Wall -Wextra -Wpedantic -Werror -I "$repo/include")

harnesses=()
for src in "$here"/*.cpp; do
    [ -e "$src" ] || continue
    harnesses+=("$(basename "$src" .cpp)")
done
if [ ${#harnesses[@]} -eq 0 ]; then
    echo "run.sh: no harness in $here" >&2
    exit 2
fi

step=${FUZZ_STEP:-all}
case $step in
all | build | run) ;;
*) echo "run.sh: FUZZ_STEP must be build, run or unset, not '$step'" >&2; exit 2 ;;
esac

# ---- build, at most $jobs at a time --------------------------------------------------------------
build_failed=0
pids=()
names=()
wait_one() {
    local pid=${pids[0]} name=${names[0]}
    pids=("${pids[@]:1}")
    names=("${names[@]:1}")
    if ! wait "$pid"; then
        echo "fuzz $name: build FAILED (log: $outdir/$name.build.log)"
        tail -n 30 "$outdir/$name.build.log"
        build_failed=1
    fi
}
for name in "${harnesses[@]}"; do
    [ "$step" != run ] || break
    [ ${#pids[@]} -lt "$jobs" ] || wait_one
    "$cxx" "${flags[@]}" "$here/$name.cpp" -o "$outdir/$name" >"$outdir/$name.build.log" 2>&1 &
    pids+=($!)
    names+=("$name")
done
while [ ${#pids[@]} -gt 0 ]; do wait_one; done
[ $build_failed -eq 0 ] || exit 1
[ "$step" != build ] || exit 0

# ---- run -----------------------------------------------------------------------------------------
scratch=$(mktemp -d "${TMPDIR:-/tmp}/skc-fuzz-corpus.XXXXXX") || exit 2
trap 'rm -rf "$scratch"' EXIT

# Each harness's run prints its result line into $outdir/<name>.result; two run at a time.
run_one() {
    local name=$1 corpus=$scratch/$1 log=$outdir/$1.log status runs
    mkdir -p "$corpus"
    if [ -d "$here/corpus/$name" ]; then
        cp -R "$here/corpus/$name/." "$corpus/"
    fi
    (cd "$scratch" && "$outdir/$name" "$corpus" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
        -print_final_stats=1 -artifact_prefix="$outdir/artifacts/$name-") >"$log" 2>&1
    status=$?
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
    if [ $status -eq 0 ] && [ -n "$runs" ]; then
        echo "fuzz $name: $runs executions, ok"
    else
        echo "fuzz $name: FAILED (exit status $status; log: $log; inputs: $outdir/artifacts/$name-*)"
        grep -E "property does not hold|ERROR:|runtime error|SUMMARY|terminate called|what\(\)" "$log" | head -n 20
    fi >"$outdir/$name.result"
}
running=()
for name in "${harnesses[@]}"; do
    if [ ${#running[@]} -ge 2 ]; then
        wait "${running[0]}"
        running=("${running[@]:1}")
    fi
    rm -f "$outdir/$name.result"
    run_one "$name" &
    running+=($!)
done
wait
failed=0
for name in "${harnesses[@]}"; do
    if [ -f "$outdir/$name.result" ]; then
        cat "$outdir/$name.result"
    else
        echo "fuzz $name: FAILED (no result: the run itself failed)"
    fi
    grep -q ', ok$' "$outdir/$name.result" 2>/dev/null || failed=1
done
exit $failed
