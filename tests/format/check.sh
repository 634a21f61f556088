#!/usr/bin/env bash
# tests/format/check.sh SOURCE_ROOT: every C++ file of skc is laid out as .clang-format says (the
# layout of Debian 12's clang-format 14), and no line of them is longer than 120 columns. On failure
# it names each file and shows how to fix it.
set -euo pipefail
cd "$1"
mapfile -t files < <(find include tools tests examples benchmarks -type f \( -name '*.hpp' -o -name '*.cpp' \) | sort)
[ ${#files[@]} -gt 100 ] || { echo "FAILED: found only ${#files[@]} C++ files under $1"; exit 1; }

bad=()
for f in "${files[@]}"; do
  if ! clang-format --style=file --dry-run --Werror "$f" >/dev/null 2>&1; then bad+=("$f"); fi
done
long=$(awk 'length > 120 {printf "%s:%d: %d columns\n", FILENAME, FNR, length}' "${files[@]}")

if [ ${#bad[@]} -gt 0 ]; then
  echo "not laid out as .clang-format says ($(clang-format --version)):"
  printf '  %s\n' "${bad[@]}"
  echo "fix with: clang-format -i ${bad[*]}"
fi
if [ -n "$long" ]; then
  echo "lines longer than 120 columns:"
  echo "$long"
fi
[ ${#bad[@]} -eq 0 ] && [ -z "$long" ] || exit 1
echo "format: ${#files[@]} files follow .clang-format"
