# Runtime tests that are not GoogleTest-under-mpiexec (included at the end of tests/CMakeLists.txt).

# ---- a program started without mpiexec but asked for 2 processes: the error shows the mpiexec line --
add_executable(runtime_started_without_mpiexec ${CMAKE_CURRENT_SOURCE_DIR}/runtime/started_without_mpiexec.cpp)
target_link_libraries(runtime_started_without_mpiexec PRIVATE kdist::kdist kdist_warnings
                      kdist_test_optimization)
foreach(_how IN ITEMS guard initialize)
  # Run directly (an MPI singleton), not under mpiexec.
  add_test(NAME runtime.started_without_mpiexec.${_how}
           COMMAND runtime_started_without_mpiexec ${_how} --epochs 3)
  set_tests_properties(runtime.started_without_mpiexec.${_how} PROPERTIES
    ENVIRONMENT "KERAS_DISTRIBUTION_NUM_PROCESSES=2"
    PASS_REGULAR_EXPRESSION "mpiexec -n 2 [^\n]*runtime_started_without_mpiexec ${_how} --epochs 3"
    FAIL_REGULAR_EXPRESSION "(^|\n)error: "
    TIMEOUT 60)
endforeach()

# ---- ScopeGuard's life: what it starts, what it finalises, kdist before and after MPI ----------
add_executable(runtime_guard_lifecycle ${CMAKE_CURRENT_SOURCE_DIR}/runtime/guard_lifecycle.cpp)
target_link_libraries(runtime_guard_lifecycle PRIVATE kdist::kdist kdist_warnings
                      kdist_test_optimization)
foreach(_mode IN ITEMS plain kokkos-first)
  add_test(NAME runtime.guard_lifecycle.${_mode}
           COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} 2 $<TARGET_FILE:runtime_guard_lifecycle> ${_mode})
  set_tests_properties(runtime.guard_lifecycle.${_mode} PROPERTIES
    PASS_REGULAR_EXPRESSION "guard lifecycle ok \\(${_mode}\\)" FAIL_REGULAR_EXPRESSION "(^|\n)error: "
    PROCESSORS 2 RESOURCE_LOCK mpi TIMEOUT 120)
endforeach()

# ---- kdist on the program's communicator (issue 22): two groups of one job train independently --
add_executable(runtime_communicator_groups ${CMAKE_CURRENT_SOURCE_DIR}/runtime/communicator_groups.cpp)
target_link_libraries(runtime_communicator_groups PRIVATE kdist_test_instances kdist::io kdist_warnings
                      kdist_test_optimization)
target_include_directories(runtime_communicator_groups PRIVATE ${PROJECT_SOURCE_DIR}/examples)
set(_groups $<TARGET_FILE:runtime_communicator_groups>)
set(_groups_dir ${CMAKE_CURRENT_BINARY_DIR}/communicator_groups)
add_test(NAME runtime.communicator_groups.split_in_halves.np4
         COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} 4 ${_groups} halves ${_groups_dir}/halves)
# MPMD: two programs of one launch, each its own kdist run.
add_test(NAME runtime.communicator_groups.mpmd.np4
         COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} 2 ${_groups} appnum ${_groups_dir}/mpmd
                 : ${MPIEXEC_NUMPROC_FLAG} 2 ${_groups} appnum ${_groups_dir}/mpmd)
set_tests_properties(runtime.communicator_groups.split_in_halves.np4 runtime.communicator_groups.mpmd.np4
  PROPERTIES PASS_REGULAR_EXPRESSION "communicator groups ok" FAIL_REGULAR_EXPRESSION "(^|\n)error: "
  PROCESSORS 4 RESOURCE_LOCK mpi TIMEOUT 120)
add_test(NAME runtime.communicator_groups.null.np1
         COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} 1 ${_groups} null)
set_tests_properties(runtime.communicator_groups.null.np1 PROPERTIES
  PASS_REGULAR_EXPRESSION "kdist::initialize: the communicator is MPI_COMM_NULL on process 0 of MPI_COMM_WORLD; give kdist the communicator"
  RESOURCE_LOCK mpi TIMEOUT 60)
# kdist only where it was started (issue 35): half 1 never starts kdist, and every kdist call there
# is a RuntimeError, never MPI_COMM_WORLD's answer.
add_test(NAME runtime.communicator_groups.kdist_only_where_started.np4
         COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} 4 ${_groups} outside)
set_tests_properties(runtime.communicator_groups.kdist_only_where_started.np4 PROPERTIES
  PASS_REGULAR_EXPRESSION "kdist only where it was started ok" FAIL_REGULAR_EXPRESSION "(^|\n)error: "
  PROCESSORS 4 RESOURCE_LOCK mpi TIMEOUT 60)
# A failure in a group of the job names the group's process, its world rank and its host.
add_test(NAME reliability.group_process_named_by_world_rank.np4
         COMMAND ${CMAKE_COMMAND} "-DCMD=${MPIEXEC_EXECUTABLE}|${MPIEXEC_NUMPROC_FLAG}|4|${_groups}|one_fails"
                 -DLIMIT=20 "-DEXPECT=error: process 1 of 2 \\(world rank 3 of 4, host [^)]+\\) failed: process 1 of half 1 cannot go on"
                 "-DFORBID=process -1" -P ${CMAKE_CURRENT_SOURCE_DIR}/reliability/expect_job_ends.cmake)
add_test(NAME reliability.group_process_stopped_named_by_world_rank.np4
         COMMAND ${CMAKE_COMMAND} "-DCMD=env|KDIST_COLLECTIVE_TIMEOUT=2|${MPIEXEC_EXECUTABLE}|${MPIEXEC_NUMPROC_FLAG}|4|${_groups}|one_stops"
                 -DLIMIT=20 "-DEXPECT=error: process 0 of 2 \\(world rank 2 of 4, host [^)]+\\) failed: kdist::all_reduce on [^\n]*: process 1 \\(world rank 3, host [^)]+\\) did not arrive"
                 "-DFORBID=process -1" -P ${CMAKE_CURRENT_SOURCE_DIR}/reliability/expect_job_ends.cmake)
set_tests_properties(reliability.group_process_named_by_world_rank.np4
                     reliability.group_process_stopped_named_by_world_rank.np4 PROPERTIES
  PASS_REGULAR_EXPRESSION "job ended as expected" PROCESSORS 4 RESOURCE_LOCK mpi TIMEOUT 60)
# An error shared by one group ends the whole job: the other group, waiting for it, is not left hanging.
add_test(NAME reliability.group_fails_job_ends.np4
         COMMAND ${CMAKE_COMMAND} "-DCMD=${MPIEXEC_EXECUTABLE}|${MPIEXEC_NUMPROC_FLAG}|4|${_groups}|fail"
                 -DLIMIT=20 "-DEXPECT=error: half 1 cannot go on.*kdist ran on 2 of its 4 processes"
                 "-DFORBID=half 0 was left to go on"
                 -P ${CMAKE_CURRENT_SOURCE_DIR}/reliability/expect_job_ends.cmake)
set_tests_properties(reliability.group_fails_job_ends.np4 PROPERTIES
  PASS_REGULAR_EXPRESSION "job ended as expected" PROCESSORS 4 RESOURCE_LOCK mpi TIMEOUT 60)

# ---- the guide's examples: every ```cpp block of the chapters below is a program, compiled here
# and run under mpiexec -n 2; "<!-- expect: REGEX -->" lines right after a block must all match its
# output. They check the guide, not speed: built at the tests' -O1 on the tests' model classes
# (kdist_test_instances; each runs for a fraction of a second), all in ONE program (a bundle,
# cmake/kdistBundles.cmake: each block in a namespace of its own, its `main` run by name, e.g.
# `guide_examples guide_06_example_3`): fifteen programs took ~1150 s of a cold CI build, four of
# them ~170 s each compiling the same training path. So a block's `main` must return its status
# (no implicit `return 0` outside the global namespace: -Werror=return-type says so). The sanitizer
# job of CI leaves them out (-DKDIST_TEST_GUIDE_EXAMPLES=OFF, scripts/run-sanitizers.sh): whole-
# library code under ASan that the MPI and trainer tests run there too.
option(KDIST_TEST_GUIDE_EXAMPLES "Build and run the guide's code blocks as programs" ON)
set(_guide_dir ${CMAKE_CURRENT_BINARY_DIR}/guide)
set(_guide_sources "")
# ----------------------------------------------------------------------------------------------
function(kdist_add_guide_examples chapter prefix)
  set(_guide ${PROJECT_SOURCE_DIR}/docs/guide/${chapter}.md)
  if(NOT EXISTS ${_guide})
    return()
  endif()
  set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${_guide})
  file(READ ${_guide} _rest)
  set(_n 0)
  set(_sources ${_guide_sources})
  while(TRUE)
    string(FIND "${_rest}" "\n```cpp\n" _at)
    if(_at EQUAL -1)
      break()
    endif()
    math(EXPR _at "${_at} + 8")
    string(SUBSTRING "${_rest}" ${_at} -1 _rest)
    string(FIND "${_rest}" "\n```" _end)
    math(EXPR _end "${_end} + 1")
    string(SUBSTRING "${_rest}" 0 ${_end} _code)
    math(EXPR _after "${_end} + 3")
    string(SUBSTRING "${_rest}" ${_after} -1 _rest)
    set(_expect "")
    while(_rest MATCHES "^\n<!-- expect: ")
      string(FIND "${_rest}" " -->" _close)
      math(EXPR _len "${_close} - 14")
      string(SUBSTRING "${_rest}" 14 ${_len} _re)
      string(APPEND _expect "${_re}\n")
      math(EXPR _skip "${_close} + 4")
      string(SUBSTRING "${_rest}" ${_skip} -1 _rest)
    endwhile()
    math(EXPR _n "${_n} + 1")
    set(_name ${prefix}_example_${_n})
    foreach(_pair IN ITEMS "${_name}.cpp|_code" "${_name}.expect|_expect")
      string(REPLACE "|" ";" _pair "${_pair}")
      list(GET _pair 0 _file)
      list(GET _pair 1 _var)
      set(_old "")
      if(EXISTS ${_guide_dir}/${_file})
        file(READ ${_guide_dir}/${_file} _old)
      endif()
      if(NOT _old STREQUAL ${_var})
        file(WRITE ${_guide_dir}/${_file} "${${_var}}")
      endif()
    endforeach()
    list(APPEND _sources ${_guide_dir}/${_name}.cpp)
    add_test(NAME guide.${chapter}.${_n}
             COMMAND ${CMAKE_COMMAND} -DMPIEXEC=${MPIEXEC_EXECUTABLE} -DNP_FLAG=${MPIEXEC_NUMPROC_FLAG} -DNP=2
                     -DPROGRAM=$<TARGET_FILE:guide_examples> -DARGS=${_name}
                     -DEXPECT_FILE=${_guide_dir}/${_name}.expect
                     -P ${CMAKE_CURRENT_SOURCE_DIR}/runtime/run_and_match.cmake)
    set_tests_properties(guide.${chapter}.${_n} PROPERTIES PROCESSORS 2 RESOURCE_LOCK mpi TIMEOUT 300)
  endwhile()
  set(_guide_sources ${_sources} PARENT_SCOPE)
endfunction()
# guide_examples: the blocks' bundle and a main that runs the one named by its first argument.
function(kdist_add_guide_program)
  kdist_write_bundle(${_guide_dir}/guide_examples_bundle.cpp ${_guide_sources})
  set(_table "")
  foreach(_src IN LISTS _guide_sources)
    get_filename_component(_name ${_src} NAME_WE)
    string(APPEND _table "    {\"${_name}\", [](int c, char** v) { return run(kdist_bundled_${_name}::main, c, v); }},\n")
  endforeach()
  file(CONFIGURE OUTPUT ${_guide_dir}/guide_examples.cpp CONTENT [=[
// Generated by tests/runtime_extra.cmake: the guide's code blocks as one program; the first
// argument names the block to run (guide_<chapter>_example_<n>), the rest are its own.
#include "guide_examples_bundle.cpp"

#include <cstdio>
#include <cstring>
#include <type_traits>

namespace {
template <class Entry>
int run(Entry entry, int argc, char** argv) {
  if constexpr (std::is_invocable_v<Entry, int, char**>) {
    return entry(argc, argv);
  } else {
    return entry();
  }
}
struct Example {
  const char* name;
  int (*entry)(int, char**);
};
const Example examples[] = {
@_table@};
}  // namespace

int main(int argc, char** argv) {
  for (const Example& example : examples) {
    if (argc > 1 && std::strcmp(argv[1], example.name) == 0) return example.entry(argc - 1, argv + 1);
  }
  std::fprintf(stderr, "guide_examples: name the guide's example to run, one of:\n");
  for (const Example& example : examples) std::fprintf(stderr, "  %s\n", example.name);
  return 2;
}
]=] @ONLY)
  add_executable(guide_examples ${_guide_dir}/guide_examples.cpp)
  target_link_libraries(guide_examples PRIVATE kdist_test_instances kdist::kdist kdist_warnings)
  kdist_bundle_options(guide_examples)
  add_test(NAME guide.unknown_example COMMAND guide_examples no_such_example)
  set_tests_properties(guide.unknown_example PROPERTIES  # (printed on that error path only)
                       PASS_REGULAR_EXPRESSION "name the guide's example to run, one of:.*guide_02_example_1")
endfunction()
if(KDIST_TEST_GUIDE_EXAMPLES)
  include(${PROJECT_SOURCE_DIR}/cmake/kdistBundles.cmake)
  kdist_add_guide_examples(02-runtime-and-collectives guide_02)
  kdist_add_guide_examples(04-tensors guide_04)
  kdist_add_guide_examples(06-custom-training guide_06)
  kdist_add_guide_examples(05-training guide_05)
  kdist_add_guide_examples(08-inside-an-hpc-code guide_08)
  kdist_add_guide_program()
endif()

# ---- threads per rank (issue 21): OMP_NUM_THREADS=2 gives a rank's host GEMMs two threads -------
if(TARGET test_ops)  # not in CI's sanitizer job (KDIST_TEST_KERNEL_REFERENCES)
  get_property(_ops_program GLOBAL PROPERTY KDIST_TEST_PROGRAM_test_ops)  # tests/bundles.cmake
  add_test(NAME test_ops.threads_per_rank COMMAND ${_ops_program} --gtest_filter=ThreadsPerRank.*)
  set_tests_properties(test_ops.threads_per_rank PROPERTIES ENVIRONMENT "OMP_NUM_THREADS=2"
    PROCESSORS 2 SKIP_REGULAR_EXPRESSION "\\[  SKIPPED \\]" TIMEOUT 60)
endif()
