#!/usr/bin/env bash
# tests/format/check.sh SOURCE_ROOT: every C++ file of skc is laid out as .clang-format says (the
# layout of Debian 12's clang-format 14), and no line of them is longer than 120 columns. On failure
# it names each file and shows how to fix it.
set -euo pipefail
cd "$1"
mapfile -t files < <(find include tools tests examples benchmarks -type f \( -name '*.hpp' -o -name '*.cpp' \) | sort)
[ ${#files[@]} -gt 100 ] || { echo "FAILED: found only ${#files[@]} C++ files under $1"; exit 1; }

# One clang-format for all files (a process per file took most of the time); it names each file that
# differs ("FILE:LINE:COL: error: code should be clang-formatted").
bad=()
if ! out=$(clang-format --style=file --dry-run --Werror "${files[@]}" 2>&1); then
  mapfile -t bad < <(printf '%s\n' "$out" | sed -n 's/^\(.*\):[0-9]*:[0-9]*: error: .*/\1/p' | sort -u)
  if [ ${#bad[@]} -eq 0 ]; then
    echo "FAILED: clang-format failed without naming a file:"
    echo "$out"
    exit 1
  fi
fi
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
