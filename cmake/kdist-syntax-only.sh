#!/bin/sh
# Compiler launcher of kdist_compile_only (cmake/kdistCompileOnly.cmake): runs the compile it is
# given with -fsyntax-only, which parses the unit and instantiates its templates (static_asserts
# and concepts are checked) but generates no code, and leaves an empty object in place of the one
# the build asked for, so that the build counts it as done. A precompiled header (.gch) is made as
# asked: the units compile on it.
out=
prev=
for arg in "$@"; do
  [ "$prev" = -o ] && out=$arg
  prev=$arg
done
case "$out" in
  *.gch) exec "$@" ;;
esac
"$@" -fsyntax-only || exit
[ -z "$out" ] || : > "$out"
