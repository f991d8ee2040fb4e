# Plain hipcc (HIP's clang; no Kokkos HIP): every public header and the static_assert translation
# units compile in one HIP file, and the static mesh/layout program compiles, links and runs.
# What tests/nvcc.cmake does for nvcc's front end, for clang's HIP mode (__host__/__device__
# overloading, its special-member inference). The headers are parsed on the host side only
# (--cuda-host-only): under Kokkos Serial a KOKKOS_INLINE_FUNCTION is a host function, so the
# device side would check nothing of kdist's, and Debian's Kokkos 3.4.1 headers do not compile
# there (host functions calling __clz). Device code is checked by scripts/hip/build-kdist-hip.sh
# against Kokkos HIP (docs/gpu.md). The program is compiled for both sides (gfx90a) and runs on the
# host (no kernel launched, no GPU needed).
# Included at the end of tests/CMakeLists.txt. KDIST_HIPCC names the compiler (found on PATH, in
# $ROCM_PATH/bin or /opt/rocm/bin); without one, or without the C++ headers it needs
# (scripts/hip/hip-stdlib-flags.sh: libstdc++ 11's under clang 15), the tests report as skipped.
find_program(KDIST_HIPCC hipcc HINTS ENV ROCM_PATH PATH_SUFFIXES bin PATHS /opt/rocm/bin
             DOC "hipcc for the plain-hipcc header checks (tests/hipcc.cmake)")
if(Kokkos_ENABLE_CUDA OR Kokkos_ENABLE_HIP OR Kokkos_ENABLE_SYCL)
  return()  # a device build: hipcc and that Kokkos do not mix (HIP: the build is hipcc's already)
endif()
set(_hip_skip "")
if(NOT KDIST_HIPCC)
  set(_hip_skip "hipcc not found (PATH, ROCM_PATH, /opt/rocm/bin)")
else()
  execute_process(COMMAND ${PROJECT_SOURCE_DIR}/scripts/hip/hip-stdlib-flags.sh ${KDIST_HIPCC}
                  OUTPUT_VARIABLE _hip_stdlib ERROR_VARIABLE _hip_err RESULT_VARIABLE _hip_rc
                  OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_STRIP_TRAILING_WHITESPACE)
  if(NOT _hip_rc EQUAL 0)
    set(_hip_skip "${_hip_err}")
  endif()
endif()
if(_hip_skip)
  add_test(NAME hipcc.skipped COMMAND ${CMAKE_COMMAND} -E echo
           "${_hip_skip}: the hipcc header checks are skipped")
  set_tests_properties(hipcc.skipped PROPERTIES SKIP_REGULAR_EXPRESSION "skipped")
  return()
endif()
separate_arguments(_hip_stdlib UNIX_COMMAND "${_hip_stdlib}")

set(_incs "$<TARGET_PROPERTY:kdist_test_deps,INTERFACE_INCLUDE_DIRECTORIES>")
set(_hipcc ${KDIST_HIPCC} -x hip --offload-arch=gfx90a -std=c++20 ${_hip_stdlib}
           "-I$<JOIN:${_incs},$<SEMICOLON>-I>")
set(_dir ${CMAKE_CURRENT_BINARY_DIR}/hipcc)
file(MAKE_DIRECTORY ${_dir})

# The same translation unit as nvcc.headers': every public header twice, then the static units,
# each in a namespace of its own. One run, host side, -fsyntax-only: about 15 s of CPU.
set(_all_includes "")
foreach(_h IN LISTS _headers)  # _headers: the public headers, from tests/CMakeLists.txt
  string(APPEND _all_includes "#include <${_h}>\n#include <${_h}> // include guard works\n")
endforeach()
kdist_write_namespaced_sources(${_dir}/all_static.hip kdist_static_ ${_static})
file(CONFIGURE OUTPUT ${_dir}/all_headers.hip
     CONTENT "${_all_includes}#include \"${_dir}/all_static.hip\"\n")
add_test(NAME hipcc.headers COMMAND ${_hipcc} --cuda-host-only -fsyntax-only
                                    ${_dir}/all_headers.hip COMMAND_EXPAND_LISTS)
set_tests_properties(hipcc.headers PROPERTIES LABELS hipcc TIMEOUT 600)

add_test(NAME hipcc.program.build
         COMMAND ${_hipcc} ${CMAKE_CURRENT_SOURCE_DIR}/hipcc/static_mesh_layout.hip -o
                 ${_dir}/static_mesh_layout COMMAND_EXPAND_LISTS)
set_tests_properties(hipcc.program.build PROPERTIES LABELS hipcc TIMEOUT 300
                     FIXTURES_SETUP hipcc_program)
add_test(NAME hipcc.program.run COMMAND ${_dir}/static_mesh_layout)
set_tests_properties(hipcc.program.run PROPERTIES LABELS hipcc FIXTURES_REQUIRED hipcc_program
                     PASS_REGULAR_EXPRESSION "static mesh and layout ok under hipcc")
