#!/usr/bin/env bash
# tests/headers/self_contained.sh INCLUDE_DIR HEADER... -- COMPILER [ARGS...]: every HEADER
# (relative to INCLUDE_DIR/skc) compiles on its own, and twice in one translation unit, with the
# project's warnings as errors. A syntax check (-fsyntax-only): what it proves is that the header
# includes what it uses, which needs no object code. Two headers at a time.
set -uo pipefail
inc=$1
shift
headers=()
while [ $# -gt 0 ] && [ "$1" != -- ]; do
  headers+=("$1")
  shift
done
shift  # --
[ ${#headers[@]} -gt 0 ] && [ $# -gt 0 ] || { echo "usage: self_contained.sh INCLUDE_DIR HEADER... -- COMPILER [ARGS...]" >&2; exit 2; }
export SKC_HEADER_INC=$inc
check() {
  local h=$1
  shift
  local out
  if out=$(printf '#include <skc/%s>\n#include <skc/%s>\n' "$h" "$h" |
    "$@" -std=c++20 -Wall -Wextra -Wpedantic -Werror -fsyntax-only -I "$SKC_HEADER_INC" -x c++ - 2>&1); then
    echo "ok $h"
  else
    printf 'FAILED %s:\n%s\n' "$h" "$out"
    return 1
  fi
}
export -f check
printf '%s\n' "${headers[@]}" | xargs -P 2 -I{} bash -c 'check "$@"' _ {} "$@"
status=$?
echo "${#headers[@]} headers checked"
exit $status
