# Test programs compiled together (included by tests/CMakeLists.txt).
#
# A test file's compile time is code generation for what it instantiates, and the MPI tests
# instantiate the same kdist templates: in a build of the 31 MPI test programs, 21 MB of their
# 23 MB of code were template instances (weak symbols, nm), only 3 MB of them different. Compiled
# KDIST_TEST_BUNDLE_SIZE files at a time as one program ("bundle": each file in a namespace of
# its own, the union of their #includes first) each instance is compiled once per bundle.
#
# Every file keeps its tests and their names: `mpi_test_<topic>.np<N>` runs the bundle under
# mpiexec with a --gtest_filter of that file's suites (and its `kdist-mpi-filter-N` line), and
# `mpi_test_<topic>` is a target that builds its bundle. A suite name may be used by one file of a
# kind only (checked here). KDIST_TEST_BUNDLE_SIZE=1 builds a program per file, as on Kokkos
# CUDA/HIP (nvcc would compile one bundle for as long as all of its files, on one core).
#
# The MPI test files share most of their instances (in five bundles of eight, 10.3 MB of code of
# which 4.8 MB different): they are one bundle by default (KDIST_MPI_TEST_BUNDLE_SIZE, 64), which
# compiles in about half the time of five (761 s against 1526 s, 4.9 GB at most). The unit test
# files share little (4.7 MB, 4.1 MB different): one bundle of them compiled no faster than four.
include(kdistBundles)  # kdist_write_bundle
set(_bundle_default 8)
set(_mpi_bundle_default 64)
if(Kokkos_ENABLE_CUDA OR Kokkos_ENABLE_HIP)
  set(_bundle_default 1)
  set(_mpi_bundle_default 1)
endif()
set(KDIST_TEST_BUNDLE_SIZE ${_bundle_default} CACHE STRING
    "Unit test files compiled together as one program (1: one program per file)")
if(KDIST_TEST_BUNDLE_SIZE EQUAL 1)
  set(_mpi_bundle_default 1)  # one program per file asked for: the MPI tests too
endif()
set(KDIST_MPI_TEST_BUNDLE_SIZE ${_mpi_bundle_default} CACHE STRING
    "MPI test files compiled together as one program (1: one program per file)")

# kdist_test_suites(SRC OUT): the GoogleTest suites SRC defines.
function(kdist_test_suites src out)
  file(STRINGS ${src} _lines REGEX "^(TEST|TEST_F|TEST_P|TYPED_TEST|TYPED_TEST_P)\\([A-Za-z0-9_]+,")
  set(_suites "")
  foreach(_line IN LISTS _lines)
    string(REGEX REPLACE "^[A-Z_]+\\(([A-Za-z0-9_]+),.*" "\\1" _suite "${_line}")
    list(APPEND _suites ${_suite})
  endforeach()
  list(REMOVE_DUPLICATES _suites)
  set(${out} ${_suites} PARENT_SCOPE)
endfunction()

# kdist_test_filter(SRC NP OUT): the --gtest_filter that runs SRC's tests at NP processes in its
# bundle: its suites (plain, typed "S/0.x", parameterized "P/S.x/0"), less or limited by the file's
# own "// kdist-mpi-filter-<NP>:" line. Empty for a program of its own without such a line.
function(kdist_test_filter src np bundled out)
  set(_own "")
  if(np)
    file(STRINGS ${src} _line REGEX "^// kdist-mpi-filter-${np}:")
    string(REGEX REPLACE "^// kdist-mpi-filter-${np}:[ ]*" "" _own "${_line}")
  endif()
  set(_filter "")
  if(_own AND NOT _own MATCHES "^-")
    set(_filter "${_own}")  # names this file's tests already
  elseif(bundled)
    kdist_test_suites(${src} _suites)
    set(_patterns "")
    foreach(_s IN LISTS _suites)
      list(APPEND _patterns "${_s}.*" "${_s}/*" "*/${_s}.*")
    endforeach()
    list(JOIN _patterns ":" _filter)
    set(_filter "${_filter}${_own}")
  else()
    set(_filter "${_own}")
  endif()
  if(_filter)
    set(${out} "--gtest_filter=${_filter}" PARENT_SCOPE)
  else()
    set(${out} "" PARENT_SCOPE)
  endif()
endfunction()

# kdist_split_test_files(KIND OUT_BUNDLED OUT_ALONE SRC...): the SRCs this build wants
# (kdist_test_wanted of <KIND><name>), split into those a bundle takes and those that stay programs
# of their own: a file that defines or undefines a macro (it would reach the files after it:
# KDIST_CHECK_COLLECTIVES, NDEBUG) or sets up a GoogleTest environment itself (MPI or kdist's
# runtime: it would meet another file's Kokkos environment in one program).
function(kdist_split_test_files kind out_bundled out_alone)
  set(_bundled "")
  set(_alone "")
  foreach(_src IN LISTS ARGN)
    get_filename_component(_name ${_src} NAME_WE)
    kdist_test_wanted(${kind}${_name} _wanted)
    if(NOT _wanted)
      continue()
    endif()
    file(STRINGS ${_src} _own REGEX "^#(define|undef) |AddGlobalTestEnvironment")
    kdist_test_keeps_build_compiler(${_src} _keeps)  # cmake/kdistTestCompiler.cmake
    if(_own OR _keeps)
      list(APPEND _alone ${_src})
    else()
      list(APPEND _bundled ${_src})
    endif()
  endforeach()
  set(${out_bundled} ${_bundled} PARENT_SCOPE)
  set(${out_alone} ${_alone} PARENT_SCOPE)
endfunction()

# kdist_add_test_bundles(KIND BUNDLE SIZE LINK SRC...): the programs of the SRCs, SIZE files each
# (in sorted order, so that neighbours such as test_checkpoint and test_checkpoint_checksums share
# one; <BUNDLE><number>), linked to LINK. Sets for each SRC, by its program name <KIND><name>:
# KDIST_TEST_PROGRAM_<KIND><name> (the target) and KDIST_TEST_BUNDLED_<KIND><name> (TRUE when it
# shares it), global properties read by kdist_test_program.
function(kdist_add_test_bundles kind bundle size link)
  set(_srcs ${ARGN})
  list(SORT _srcs)
  list(LENGTH _srcs _n)
  if(_n EQUAL 0)
    return()
  endif()
  # one file per suite name in a kind: a bundle runs a file's tests by its suites
  set(_seen "")
  foreach(_src IN LISTS _srcs)
    kdist_test_suites(${_src} _suites)
    if(NOT _suites)
      message(FATAL_ERROR "${_src}: no line starts with TEST(, TEST_F(, TEST_P( or TYPED_TEST(Suite, "
                          "...; its bundle runs a file's tests by their suites (tests/bundles.cmake)")
    endif()
    foreach(_s IN LISTS _suites)
      if(_s IN_LIST _seen)
        message(FATAL_ERROR "${_src}: the test suite '${_s}' is also in another ${kind} test file; "
                            "a suite name belongs to one file (the files are compiled together "
                            "and run by suite, tests/bundles.cmake): rename one of them")
      endif()
      list(APPEND _seen ${_s})
    endforeach()
  endforeach()
  set(_size ${size})
  if(_size LESS 1)
    set(_size 1)
  endif()
  math(EXPR _bundles "(${_n} + ${_size} - 1) / ${_size}")
  math(EXPR _last "${_bundles} - 1")
  foreach(_b RANGE ${_last})
    # an even share of the files: bundle b takes files [b*n/B, (b+1)*n/B)
    math(EXPR _from "${_b} * ${_n} / ${_bundles}")
    math(EXPR _to "(${_b} + 1) * ${_n} / ${_bundles} - 1")
    set(_part "")
    foreach(_i RANGE ${_from} ${_to})
      list(GET _srcs ${_i} _src)
      list(APPEND _part ${_src})
    endforeach()
    list(LENGTH _part _count)
    if(_count EQUAL 1)
      get_filename_component(_name ${_part} NAME_WE)
      set(_target ${kind}${_name})
      add_executable(${_target} ${_part})
      set_property(GLOBAL PROPERTY KDIST_TEST_BUNDLED_${_target} FALSE)
    else()
      math(EXPR _number "${_b} + 1")
      set(_target ${bundle}${_number})
      set(_source ${CMAKE_CURRENT_BINARY_DIR}/bundles/${_target}.cpp)
      kdist_write_bundle(${_source} ${_part})
      add_executable(${_target} ${_source})
      kdist_bundle_options(${_target})
      foreach(_src IN LISTS _part)
        get_filename_component(_name ${_src} NAME_WE)
        add_custom_target(${kind}${_name} DEPENDS ${_target})  # `ninja mpi_test_gpt` still builds it
        set_property(GLOBAL PROPERTY KDIST_TEST_BUNDLED_${kind}${_name} TRUE)
        set_property(GLOBAL PROPERTY KDIST_TEST_PROGRAM_${kind}${_name} ${_target})
      endforeach()
    endif()
    set_property(GLOBAL PROPERTY KDIST_TEST_PROGRAM_${_target} ${_target})
    target_link_libraries(${_target} PRIVATE ${link})
    kdist_test_use_pch(${_target})
  endforeach()
endfunction()

# kdist_test_program(NAME OUT_TARGET OUT_FILTER [NP]): the program that holds the tests of test file
# NAME (mpi_test_gpt, test_ops) and the --gtest_filter argument that runs only them (at NP
# processes); empty filter when it has the program to itself.
function(kdist_test_program name src out_target out_filter)
  get_property(_target GLOBAL PROPERTY KDIST_TEST_PROGRAM_${name})
  get_property(_bundled GLOBAL PROPERTY KDIST_TEST_BUNDLED_${name})
  set(_np "${ARGN}")
  kdist_test_filter(${src} "${_np}" "${_bundled}" _filter)
  set(${out_target} ${_target} PARENT_SCOPE)
  set(${out_filter} "${_filter}" PARENT_SCOPE)
endfunction()
