# The layer rule of docs/design.md, as tests (included from tests/CMakeLists.txt):
#   layering.include_rule        every header includes only its folder and the folders below, and
#                                only parallel/ (and io/detail/) calls MPI
#   layering.rejects_upward      the checker fails on a tree with an upward include (it can fail)
#   layering.rejects_raw_mpi     ... and on a header above parallel/ that calls MPI itself
#   layering.rejects_layer_reaching_into_the_step  ... and on a layer that includes nn/train/
#   layering.rejects_library_not_included  ... and on a header naming Kokkos:: without including it
#   layering.core_alone.<h>      each core/ header compiles with nothing but include/ on the path:
#                                no MPI, Kokkos, Eigen, RE2 (core is std only)
#   layering.core_nvcc           all of core/ in one .cu under plain nvcc, include/ only
add_test(NAME layering.include_rule
         COMMAND ${CMAKE_COMMAND} -DKDIST_INCLUDE_DIR=${PROJECT_SOURCE_DIR}/include
                 -P ${CMAKE_CURRENT_SOURCE_DIR}/layering/check_layers.cmake)
add_test(NAME layering.rejects_upward
         COMMAND ${CMAKE_COMMAND} -DKDIST_INCLUDE_DIR=${CMAKE_CURRENT_SOURCE_DIR}/layering/upward/include
                 -P ${CMAKE_CURRENT_SOURCE_DIR}/layering/check_layers.cmake)
set_tests_properties(layering.rejects_upward PROPERTIES
                     PASS_REGULAR_EXPRESSION "core/mesh.hpp:3: includes <kdist/nn/layer.hpp>.*kdist layering: 1 include\\(s\\) or MPI call\\(s\\) break the layer rule")
add_test(NAME layering.rejects_raw_mpi
         COMMAND ${CMAKE_COMMAND} -DKDIST_INCLUDE_DIR=${CMAKE_CURRENT_SOURCE_DIR}/layering/raw_mpi/include
                 -P ${CMAKE_CURRENT_SOURCE_DIR}/layering/check_layers.cmake)
set_tests_properties(layering.rejects_raw_mpi PROPERTIES
                     PASS_REGULAR_EXPRESSION "nn/sync.hpp:7: calls MPI_Allreduce directly.*kdist layering: 1 include\\(s\\) or MPI call\\(s\\) break the layer rule")
add_test(NAME layering.rejects_layer_reaching_into_the_step
         COMMAND ${CMAKE_COMMAND} -DKDIST_INCLUDE_DIR=${CMAKE_CURRENT_SOURCE_DIR}/layering/layer_into_step/include
                 -P ${CMAKE_CURRENT_SOURCE_DIR}/layering/check_layers.cmake)
set_tests_properties(layering.rejects_layer_reaching_into_the_step PROPERTIES
                     PASS_REGULAR_EXPRESSION "nn/layers/dense.hpp:3: includes.*nn/train/gradient_sync.hpp.*a layer does not.*kdist layering: 1 include\\(s\\) or MPI call\\(s\\) break the layer rule")
add_test(NAME layering.rejects_library_not_included
         COMMAND ${CMAKE_COMMAND} -DKDIST_INCLUDE_DIR=${CMAKE_CURRENT_SOURCE_DIR}/layering/library_not_included/include
                 -P ${CMAKE_CURRENT_SOURCE_DIR}/layering/check_layers.cmake)
set_tests_properties(layering.rejects_library_not_included PROPERTIES
                     PASS_REGULAR_EXPRESSION "tensor/block.hpp:6: names Kokkos:: but does not.*kdist layering: 1 include\\(s\\) or MPI call\\(s\\) break the layer rule")

file(GLOB_RECURSE _core_headers CONFIGURE_DEPENDS RELATIVE ${PROJECT_SOURCE_DIR}/include
     ${PROJECT_SOURCE_DIR}/include/kdist/core/*.hpp)
set(_core_dir ${CMAKE_CURRENT_BINARY_DIR}/core_alone)
file(MAKE_DIRECTORY ${_core_dir})
set(_core_all "")
foreach(_h IN LISTS _core_headers)
  string(MAKE_C_IDENTIFIER ${_h} _id)
  file(CONFIGURE OUTPUT ${_core_dir}/${_id}.cpp CONTENT "#include <${_h}>\n")
  string(APPEND _core_all "#include <${_h}>\n")
  # -nostdinc++ is not used: the standard library is allowed; nothing else is on the path.
  # -c -o, not -fsyntax-only: nvcc_wrapper (Kokkos CUDA) passes -fsyntax-only on and then links.
  add_test(NAME layering.core_alone.${_h}
           COMMAND ${CMAKE_CXX_COMPILER} -std=c++20 -c -I${PROJECT_SOURCE_DIR}/include
                   ${_core_dir}/${_id}.cpp -o ${_core_dir}/${_id}.o)
endforeach()
file(CONFIGURE OUTPUT ${_core_dir}/all_core.cu CONTENT "${_core_all}int main() { return 0; }\n")
if(KDIST_NVCC AND NOT Kokkos_ENABLE_CUDA)
  add_test(NAME layering.core_nvcc
           COMMAND ${KDIST_NVCC} -std=c++20 -x cu -I${PROJECT_SOURCE_DIR}/include -c
                   ${_core_dir}/all_core.cu -o ${_core_dir}/all_core.o)
  set_tests_properties(layering.core_nvcc PROPERTIES LABELS nvcc TIMEOUT 300)
endif()
