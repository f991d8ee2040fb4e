#!/bin/bash
# Prints the flags hipcc needs to compile C++20 with libstdc++ here (nothing when it needs none).
# usage: hip-stdlib-flags.sh [HIPCC]
# clang 15 (Debian 12's hipcc 5.2.3) crashes in HIP mode on libstdc++ 12's std::pair under C++20
# (its constrained operator=, met by every std::map and <regex>; llvm-project#62017,
# kokkos#5737; fixed in clang 16). Where hipcc's clang is older than 16 and libstdc++ 11's headers
# are installed (libstdc++-11-dev), the flags select them; the program still links the system's
# libstdc++.so.6 (newer, compatible). Exit status 1, with a message, where they are needed and
# missing.
set -euo pipefail
HIPCC=${1:-$(command -v hipcc || true)}
[ -n "$HIPCC" ] || { echo "hipcc not found" >&2; exit 1; }
major=$("$HIPCC" --version 2>/dev/null | sed -n 's/.*clang version \([0-9]*\).*/\1/p' | head -1)
[ -n "$major" ] && [ "$major" -lt 16 ] || exit 0
triple=$(gcc -dumpmachine 2>/dev/null || echo x86_64-linux-gnu)
if [ ! -d /usr/include/c++/11 ] || [ ! -d "/usr/include/$triple/c++/11" ]; then
  echo "hipcc's clang $major needs libstdc++ 11's headers for C++20: apt-get install libstdc++-11-dev" >&2
  exit 1
fi
# -stdlib++-isystem, not -nostdinc++ -isystem: clang's CUDA/HIP wrappers of <new>, <cmath>, <complex>
# (device overloads, e.g. placement new) must stay in front of the library's headers.
echo "-stdlib++-isystem /usr/include/c++/11 -stdlib++-isystem /usr/include/$triple/c++/11" \
  "-stdlib++-isystem /usr/include/c++/11/backward"
