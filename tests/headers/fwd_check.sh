#!/usr/bin/env bash
# tests/headers/fwd_check.sh SOURCE_ROOT: include/skc/fwd.hpp declares every public type of the
# library (a struct, class or enum class at namespace skc scope, outside detail, in a header under
# include/skc other than ext/), and nothing that is not one. The few it leaves to their own headers
# are listed below with the reason, as fwd.hpp says.
set -euo pipefail
cd "$1"
# Declared in their own headers only: OpDesc's parameters are values of class types that must be
# complete; FunctionInvoker and LockTraits are constrained, so that a concept check on them stays a
# plain `false`.
own_header_only="FunctionInvoker LockTraits OpDesc"

public=$(for f in include/skc/*.hpp include/skc/policy/*.hpp include/skc/detail/*.hpp; do
  awk '
    /^namespace (skc::)?detail(::[a-z_]+)? \{/ { d = 1 }
    /^\}  \/\/ namespace (skc::)?detail(::[a-z_]+)?$/ { d = 0 }
    /^namespace [a-z]+ \{/ && $2 != "skc" && $2 != "detail" { o = 1 }
    /^\}  \/\/ namespace [a-z]+$/ && $4 != "skc" && $4 != "detail" { o = 0 }
    !d && !o && /^(struct|class|enum class) [A-Z][A-Za-z]* *(:[^:]|\{|final)/ {
      print ($1 == "enum" ? $3 : $2)
    }' "$f"
done | sort -u)
declared=$(grep -oE '^(struct|class|enum class) [A-Z][A-Za-z]*' include/skc/fwd.hpp | awk '{print $NF}' | sort -u)

status=0
for t in $public; do
  case " $own_header_only " in *" $t "*) continue ;; esac
  if ! grep -qx "$t" <<<"$declared"; then
    echo "fwd.hpp does not declare $t"
    status=1
  fi
done
for t in $declared; do
  if ! grep -qx "$t" <<<"$public"; then
    echo "fwd.hpp declares $t, which no public header defines"
    status=1
  fi
done
[ $status -eq 0 ] && echo "fwd.hpp: $(wc -w <<<"$declared") public types declared, $(wc -w <<<"$own_header_only") left to their own headers"
exit $status
