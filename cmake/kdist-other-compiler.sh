#!/bin/sh
# A compiler launcher (CXX_COMPILER_LAUNCHER) that compiles a target with another compiler than
# the build's: the test programs with clang++ at -O0 in a GCC build (cmake/kdistTestCompiler.cmake).
#   kdist-other-compiler.sh <ccache or -> <compiler> [<flag>...] -- <build's compiler> <argument>...
# The build's compiler is dropped; so are its arguments that set an optimisation level or that the
# other compiler does not know (-Wno-subobject-linkage is GCC's); the flags before -- come last.
set -eu
cache=$1
compiler=$2
shift 2
extra=""
while [ "$#" -gt 0 ] && [ "$1" != "--" ]; do
  extra="$extra $1"
  shift
done
if [ "$#" -lt 2 ]; then
  echo "kdist-other-compiler.sh: usage: <ccache or -> <compiler> [<flag>...] -- <compiler> <argument>..." >&2
  exit 2
fi
shift 2  # "--" and the build's compiler
n=$#
while [ "$n" -gt 0 ]; do
  a=$1
  shift
  n=$((n - 1))
  case "$a" in
    -O | -O[0-9s] | -Og | -Ofast | -Wno-subobject-linkage) ;;
    *) set -- "$@" "$a" ;;
  esac
done
# shellcheck disable=SC2086 # the extra flags are words
set -- "$@" $extra
if [ "$cache" = "-" ]; then
  exec "$compiler" "$@"
fi
exec "$cache" "$compiler" "$@"
