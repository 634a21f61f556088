#!/usr/bin/env bash
# tests/packaging/run.sh SOURCE_ROOT: installs skc's headers, pkg-config file and CMake package into a
# temporary prefix (`meson install`), then builds and runs one tiny consumer per way of using it:
# CMake (find_package, skc::skc, after the prefix has been moved), a Makefile on `pkg-config skc`,
# Meson on dependency('skc') from the prefix, and Meson with skc as a subproject. Each consumer
# prints the same digest. A CMake project asking for a version skc is not must fail, naming it.
set -euo pipefail
src=$(cd "$1" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cxx=${CXX:-c++}

quietly() {  # runs a command, showing its output only when it fails
  if ! "$@" >"$work/last.log" 2>&1; then
    cat "$work/last.log"
    echo "FAILED: $*"
    exit 1
  fi
}

consumer() {  # consumer NAME: a copy of the project NAME with consumer.cpp beside it
  mkdir -p "$work/$1"
  cp -r "$here/${2:-$1}/." "$here/consumer.cpp" "$work/$1/"
  echo "$work/$1"
}

outputs=()
run_consumer() {  # run_consumer LABEL EXE
  local out
  out=$("$2")
  echo "$1: $out"
  if ! [[ $out =~ ^MatMulV2\ [0-9a-f]{32}$ ]]; then
    echo "FAILED: $1 printed '$out'"
    exit 1
  fi
  outputs+=("$out")
}

prefix=$work/prefix
quietly meson setup "$work/skc-build" "$src" --prefix "$prefix" \
  -Dtests=disabled -Dexamples=disabled -Dbenchmarks=disabled -Dtorch=disabled
quietly meson install -C "$work/skc-build" --no-rebuild --tags devel
for f in share/pkgconfig/skc.pc share/cmake/skc/skcConfig.cmake share/cmake/skc/skcConfigVersion.cmake \
         include/skc/skc.hpp include/skc/ext/mpi.hpp; do
  [ -f "$prefix/$f" ] || { echo "FAILED: meson install did not install $f"; exit 1; }
done

# pkg-config, from a plain Makefile.
dir=$(consumer pkgconfig)
PKG_CONFIG_PATH=$prefix/share/pkgconfig quietly make -C "$dir" CXX="$cxx"
run_consumer pkg-config "$dir/consumer"

# Meson, dependency('skc') found through the installed skc.pc.
dir=$(consumer meson-installed meson)
CXX=$cxx PKG_CONFIG_PATH=$prefix/share/pkgconfig quietly meson setup "$dir/build" "$dir" --wrap-mode=nofallback
quietly meson compile -C "$dir/build"
run_consumer "meson, installed" "$dir/build/consumer"

# Meson, skc as a subproject: only the dependency is configured, none of skc's own targets.
dir=$(consumer meson-subproject meson)
mkdir -p "$dir/subprojects"
ln -s "$src" "$dir/subprojects/skc"
CXX=$cxx quietly meson setup "$dir/build" "$dir" --force-fallback-for=skc
quietly meson compile -C "$dir/build"
run_consumer "meson, subproject" "$dir/build/consumer"
if grep -q "^build subprojects/skc/" "$dir/build/build.ninja"; then
  echo "FAILED: as a subproject, skc configured its own tools, tests or examples"
  exit 1
fi

# CMake, with the installed tree moved elsewhere first: skcConfig.cmake finds the prefix from its place.
mv "$prefix" "$work/moved-prefix"
dir=$(consumer cmake)
quietly cmake -S "$dir" -B "$dir/build" -DCMAKE_PREFIX_PATH="$work/moved-prefix" -DCMAKE_CXX_COMPILER="$cxx"
quietly cmake --build "$dir/build"
run_consumer "cmake, moved prefix" "$dir/build/consumer"

# CMake asking for a version this skc is not: configuring fails and says which version it found.
dir=$(consumer cmake-too-new cmake)
sed -i 's/find_package(skc 0.1 REQUIRED)/find_package(skc 9.9 REQUIRED)/' "$dir/CMakeLists.txt"
if cmake -S "$dir" -B "$dir/build" -DCMAKE_PREFIX_PATH="$work/moved-prefix" >"$work/last.log" 2>&1; then
  echo "FAILED: find_package(skc 9.9) succeeded"
  exit 1
fi
version=$(sed -n "s/^  version: '\(.*\)',$/\1/p" "$src/meson.build")
if ! grep -q "version: $version" "$work/last.log"; then
  cat "$work/last.log"
  echo "FAILED: find_package(skc 9.9) did not name the version found ($version)"
  exit 1
fi
echo "cmake, find_package(skc 9.9): refused, found version $version"

for out in "${outputs[@]}"; do
  if [ "$out" != "${outputs[0]}" ]; then
    echo "FAILED: the consumers printed different digests"
    exit 1
  fi
done
echo "packaging: ${#outputs[@]} consumers built and agree"
