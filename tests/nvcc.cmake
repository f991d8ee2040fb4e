# Plain nvcc (no Kokkos CUDA): every public header and the static_assert translation units
# compile in one .cu file, and a static mesh/layout program compiles, links and runs.
# A user's GPU code includes kdist; these tests keep any header from breaking under nvcc's front
# end unnoticed where no Kokkos CUDA is at hand (CI). The extended-lambda rules need Kokkos CUDA:
# ../shared/gpu/build-kdist-cuda.sh checks those (docs/gpu.md).
# Included at the end of tests/CMakeLists.txt. KDIST_NVCC names the compiler (found on PATH, in
# $CUDA_HOME/bin or /usr/local/cuda/bin); without one the tests are reported as skipped.
find_program(KDIST_NVCC nvcc HINTS ENV CUDA_HOME PATH_SUFFIXES bin PATHS /usr/local/cuda/bin
             DOC "nvcc for the plain-nvcc header checks (tests/nvcc.cmake)")
if(Kokkos_ENABLE_CUDA)
  return()  # the whole build is nvcc's already
endif()
if(NOT KDIST_NVCC)
  add_test(NAME nvcc.skipped COMMAND ${CMAKE_COMMAND} -E echo
           "nvcc not found (PATH, CUDA_HOME, /usr/local/cuda/bin): the nvcc header checks are skipped")
  set_tests_properties(nvcc.skipped PROPERTIES SKIP_REGULAR_EXPRESSION "skipped")
  return()
endif()

# The include directories of kdist and of everything it links (transitive), as nvcc flags.
set(_incs "$<TARGET_PROPERTY:kdist_test_deps,INTERFACE_INCLUDE_DIRECTORIES>")
set(_nvcc ${KDIST_NVCC} -std=c++20 -x cu "-I$<JOIN:${_incs},$<SEMICOLON>-I>")
set(_dir ${CMAKE_CURRENT_BINARY_DIR}/nvcc)
file(MAKE_DIRECTORY ${_dir})

# One .cu holding every public header (each twice: the include guards work) and then the
# static_assert translation units (tests/static/*.cpp), each in a namespace of its own after the
# headers it includes. A header on its own is checked by the header_alone objects
# (tests/CMakeLists.txt). nvcc's own fixed cost and parsing kdist dominate a run: one run per
# header cost CI about 6 minutes of its 90, one per folder about 5 (16 runs), the headers and the
# static units as two runs about 5 (150 s each), one run for both about half that.
set(_all_includes "")
foreach(_h IN LISTS _headers)  # _headers: the public headers, from tests/CMakeLists.txt
  string(APPEND _all_includes "#include <${_h}>\n#include <${_h}> // include guard works\n")
endforeach()
kdist_write_namespaced_sources(${_dir}/all_static.cu kdist_static_ ${_static})  # tests/CMakeLists.txt
file(CONFIGURE OUTPUT ${_dir}/all_headers.cu
     CONTENT "${_all_includes}#include \"${_dir}/all_static.cu\"\n")
# The host compiler checks it without generating code (-fsyntax-only still instantiates the
# templates the unit uses): its code generation was 135 s of the run's 220, the device side (cicc)
# 41 s.
add_test(NAME nvcc.headers COMMAND ${_nvcc} -c ${_dir}/all_headers.cu -o ${_dir}/all_headers.o
                                   -Xcompiler -fsyntax-only COMMAND_EXPAND_LISTS)
set_tests_properties(nvcc.headers PROPERTIES LABELS nvcc TIMEOUT 600)

add_test(NAME nvcc.program.build
         COMMAND ${_nvcc} ${CMAKE_CURRENT_SOURCE_DIR}/nvcc/static_mesh_layout.cu -o
                 ${_dir}/static_mesh_layout COMMAND_EXPAND_LISTS)
set_tests_properties(nvcc.program.build PROPERTIES LABELS nvcc TIMEOUT 300
                     FIXTURES_SETUP nvcc_program)
add_test(NAME nvcc.program.run COMMAND ${_dir}/static_mesh_layout)
set_tests_properties(nvcc.program.run PROPERTIES LABELS nvcc FIXTURES_REQUIRED nvcc_program
                     PASS_REGULAR_EXPRESSION "static mesh and layout ok under nvcc")
