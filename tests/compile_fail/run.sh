#!/bin/sh
# Compile-fail test: run.sh FILE COMPILER [ARGS...]. FILE must fail to compile (syntax check only)
# with a diagnostic containing the text of its "// expect: " line; a FILE without that line must
# compile (the control that proves the harness and the include paths work).
file=$1
shift
expect=$(sed -n 's|^// expect: ||p' "$file")
out=$("$@" -fsyntax-only "$file" 2>&1)
rc=$?
if [ -z "$expect" ]; then
  if [ $rc -ne 0 ]; then
    printf 'expected %s to compile, but:\n%s\n' "$file" "$out"
    exit 1
  fi
  echo "compiles, as expected"
  exit 0
fi
if [ $rc -eq 0 ]; then
  printf 'expected %s not to compile\n' "$file"
  exit 1
fi
case $out in
  *"$expect"*) echo "fails with: $expect"; exit 0 ;;
esac
printf 'the diagnostics do not contain: %s\n--- diagnostics ---\n%s\n' "$expect" "$out"
exit 1
