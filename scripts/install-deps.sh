#!/usr/bin/env bash
# Installs the Debian packages skc needs to build, test and benchmark, when any is missing.
set -euo pipefail

packages=(
  meson ninja-build pkg-config g++ clang      # build, on both compilers
  libboost-dev nlohmann-json3-dev             # Boost.Hana and nlohmann/json (the headers include them)
  doctest-dev libbenchmark-dev libssl-dev     # tests; benchmarks (OpenSSL's SHA-256 is a baseline)
  libcli11-dev                                # the skc tool's command line (tools/)
  makeself                                    # run packages
  cmake make                                  # tests/packaging: CMake and Makefile consumers of an install
  clang-format                                # tests/format: the layout of .clang-format
  libopenblas-dev                             # benchmarks: OpenBLAS sgemm beside the host MatMul
  libxsmm-dev                                 # benchmarks: LIBXSMM beside the host MatMul
  libopenmpi-dev openmpi-bin                  # optional MpiGather (skc/ext/mpi.hpp), skc compile --mpi, tests/mpi
  libtorch-dev python3-torch                  # the PyTorch plugin examples/torch (libskc_torch.so) and its tests
  python3-tqdm python3-pytest                 # the Python package skc_torch: its progress bar; its tests
  libhiredis-dev redis-server                 # the Redis remote cache tier (skc/ext/redis.hpp) and its tests
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
[ ${#missing[@]} -eq 0 ] && exit 0

echo "installing: ${missing[*]}"
sudo=""
if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -q
$sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
