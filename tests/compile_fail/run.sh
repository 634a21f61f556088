#!/bin/sh
# Compile-fail test: run.sh FILE COMPILER [ARGS...]. FILE must fail to compile (syntax check only)
# with diagnostics containing the text of each of its "// expect: " lines (a long message is given
# in pieces, one per line, to keep lines within 120 columns); a FILE without such a line must
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
# One piece per line; the diagnostics must hold each.
missing=$(printf '%s\n' "$expect" | while IFS= read -r piece; do
  case $out in
    *"$piece"*) ;;
    *) printf '%s\n' "$piece" ;;
  esac
done)
if [ -z "$missing" ]; then
  echo "fails with: $expect"
  exit 0
fi
printf 'the diagnostics do not contain: %s\n--- diagnostics ---\n%s\n' "$missing" "$out"
exit 1
