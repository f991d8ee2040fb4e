# Targets whose translation units are compiled to be checked, never linked or run: the compile-fail
# good twins, the static_assert units, the test command's benchmarks. (Not the header-alone units:
# parsing is their time, ~700 s of CPU with or without code generation.)
# Code generation was most of their time (benchmarks 87 s against ~220 s at -O1, the good twins
# 46 s against ~120 s): GCC and clang check them with -fsyntax-only, which still instantiates every
# template a unit uses (and so every static_assert and concept in it). nvcc (Kokkos CUDA) compiles
# them whole.
include_guard(GLOBAL)
set(_kdist_syntax_only ${CMAKE_CURRENT_LIST_DIR}/kdist-syntax-only.sh)

# kdist_compile_only(TARGET...): each TARGET (an OBJECT library nothing links) is checked, not built.
function(kdist_compile_only)
  if(NOT CMAKE_CXX_COMPILER_ID MATCHES "^(GNU|Clang)$" OR Kokkos_ENABLE_CUDA OR Kokkos_ENABLE_HIP)
    return()
  endif()
  foreach(_target IN LISTS ARGN)
    set_target_properties(${_target} PROPERTIES
                          CXX_COMPILER_LAUNCHER ${_kdist_syntax_only})
  endforeach()
endfunction()
