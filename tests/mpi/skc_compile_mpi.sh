#!/bin/sh
# skc compile --mpi with 2 ranks of one MPI job on this machine (the real shared-memory node split):
# usage: skc_compile_mpi.sh MPIRUN SKC HOST_OP_COMPILER OPS_DIR
# Checks: both ranks succeed with the same key, one is the leader, one compile, one install.
set -eu
mpirun=$1 skc=$2 compiler=$3 ops=$4
tmp=$(mktemp -d "${TMPDIR:-/tmp}/skc-mpi-cli-XXXXXX")
trap 'rm -rf "$tmp"' EXIT
mkdir "$tmp/ops" "$tmp/base"
cp "$ops/Add_float_ND_32_64_9.json" "$ops/Gelu_float_ND_32_256_8.json" "$tmp/ops/"
fail() { echo "FAIL: $*"; cat "$tmp/out"; exit 1; }

"$mpirun" --oversubscribe -np 2 "$skc" compile --mpi --ops "$tmp/ops" --base "$tmp/base" --compiler "$compiler" \
  --device host-cpu --toolchain-version 1.0 --op-library "$tmp/lib" --timeout 60 >"$tmp/out" 2>&1 ||
  fail "mpirun exited with status $?"
[ "$(grep -c '^skc compile: miss, compiled' "$tmp/out")" = 2 ] || fail "expected two 'miss, compiled' reports"
[ "$(grep -c 'local rank 0 of 2 (the leader), 2 ops gathered' "$tmp/out")" = 1 ] || fail "expected one leader"
[ "$(grep -c 'local rank 1 of 2, 2 ops gathered' "$tmp/out")" = 1 ] || fail "expected one follower"
[ "$(grep '^  key ' "$tmp/out" | sort -u | wc -l)" = 1 ] || fail "the ranks report different keys"
[ "$(find "$tmp/base" -name op_compiler.log | wc -l)" = 1 ] || fail "expected one compiler run"
[ "$(ls "$tmp/lib/static_kernel/host" | grep -c '^[0-9a-f]\{32\}$')" = 1 ] || fail "expected one installed package"
"$skc" uninstall --op-library "$tmp/lib" >/dev/null
echo "PASS"
