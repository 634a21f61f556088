#!/usr/bin/env bash
# tests/headers/self_contained.sh INCLUDE_DIR HEADER... -- COMPILER [ARGS...]: every HEADER
# (relative to INCLUDE_DIR/skc) compiles on its own, and twice in one translation unit, with the
# project's warnings as errors. A syntax check (-fsyntax-only): what it proves is that the header
# includes what it uses, which needs no object code. Two headers at a time.
#
# The headers that include op_info_io.hpp (and with it nlohmann/json), directly or through others,
# are checked with it precompiled (a PCH made once, with the same compiler and flags): parsing it and
# instantiating its JSON code was about a third of each of their checks. That proves the same: a
# header's own code comes after all of its #include lines, where everything op_info_io.hpp declares
# is visible anyway, and each header it includes is checked on its own.
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
flags=(-std=c++20 -Wall -Wextra -Wpedantic -Werror -I "$inc")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# The headers whose includes (followed through INCLUDE_DIR/skc) reach op_info_io.hpp.
mapfile -t with_json < <(python3 - "$inc/skc" "${headers[@]}" <<'PY'
import os, re, sys
root, names = sys.argv[1], sys.argv[2:]
inc = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
memo = {}
def reaches(path, seen):
    if path in memo: return memo[path]
    if path in seen or not os.path.isfile(path): return False
    seen.add(path)
    text = open(path, encoding="utf-8").read()
    found = False
    for name in inc.findall(text):
        dep = os.path.normpath(os.path.join(os.path.dirname(path), name))
        if dep == os.path.join(root, "op_info_io.hpp") or reaches(dep, seen):
            found = True
            break
    memo[path] = found
    return found
for n in names:
    if reaches(os.path.normpath(os.path.join(root, n)), set()):
        print(n)
PY
)
pch_args=()
if [ ${#with_json[@]} -gt 0 ]; then
  printf '#include <skc/op_info_io.hpp>\n' >"$work/pch.hpp"
  if "$@" --version 2>/dev/null | grep -q clang; then
    out=$work/pch.hpp.pch
    pch_args=(-include-pch "$out")
  else
    out=$work/pch.hpp.gch
    pch_args=(-include "$work/pch.hpp" -Winvalid-pch)
  fi
  if ! msg=$("$@" "${flags[@]}" -x c++-header "$work/pch.hpp" -o "$out" 2>&1); then
    printf 'FAILED to precompile op_info_io.hpp:\n%s\n' "$msg"
    exit 1
  fi
fi
export SKC_HEADER_FLAGS="${flags[*]}" SKC_PCH_ARGS="${pch_args[*]}" SKC_WITH_JSON=" ${with_json[*]} "
check() {
  local h=$1
  shift
  local out pch=()
  # shellcheck disable=SC2206 # the arguments were joined with spaces, and hold none
  [[ $SKC_WITH_JSON == *" $h "* ]] && pch=($SKC_PCH_ARGS)
  # shellcheck disable=SC2086
  if out=$(printf '#include <skc/%s>\n#include <skc/%s>\n' "$h" "$h" |
    "$@" $SKC_HEADER_FLAGS "${pch[@]}" -fsyntax-only -x c++ - 2>&1); then
    echo "ok $h${pch:+ (op_info_io.hpp precompiled)}"
  else
    printf 'FAILED %s:\n%s\n' "$h" "$out"
    return 1
  fi
}
export -f check
printf '%s\n' "${headers[@]}" | xargs -P 2 -I{} bash -c 'check "$@"' _ {} "$@"
status=$?
echo "${#headers[@]} headers checked, ${#with_json[@]} of them with op_info_io.hpp precompiled"
exit $status
