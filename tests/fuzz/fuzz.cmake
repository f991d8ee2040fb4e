# libFuzzer targets: tests/fuzz/fuzz_<name>.cpp, each defining LLVMFuzzerTestOneInput.
# - Every build (g++ too) replays tests/fuzz/corpus/<name>/ through the target (fuzz.<name>.corpus):
#   the seeds and the inputs that once crashed kdist, as regression tests. Without libFuzzer a
#   small main (replay_main.cpp) feeds the files; with it, the fuzzer binary runs them.
# - Where the compiler has libFuzzer (clang with libclang-rt-14-dev; scripts/run-sanitizers.sh
#   builds with it), the target is also a fuzzer under ASan+UBSan, run for KDIST_FUZZ_SECONDS per
#   target in CTest (fuzz.<name>.smoke) and for as long as you like by scripts/fuzz.sh.
# Included from tests/CMakeLists.txt.
set(KDIST_FUZZ_SECONDS 15 CACHE STRING "Seconds each fuzz target runs in CTest (fuzz.*.smoke)")

include(CheckCXXSourceCompiles)
set(CMAKE_REQUIRED_FLAGS -fsanitize=fuzzer)
set(CMAKE_REQUIRED_LINK_OPTIONS -fsanitize=fuzzer)
check_cxx_source_compiles([[
#include <cstddef>
#include <cstdint>
extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t*, std::size_t) { return 0; }
]] KDIST_HAVE_LIBFUZZER)
unset(CMAKE_REQUIRED_FLAGS)
unset(CMAKE_REQUIRED_LINK_OPTIONS)

set(_fuzz_dir ${CMAKE_CURRENT_SOURCE_DIR}/fuzz)
file(GLOB _fuzz_targets CONFIGURE_DEPENDS ${_fuzz_dir}/fuzz_*.cpp)
foreach(_src IN LISTS _fuzz_targets)
  get_filename_component(_name ${_src} NAME_WE)
  string(REGEX REPLACE "^fuzz_" "" _short ${_name})
  set(_corpus ${_fuzz_dir}/corpus/${_short})

  if(NOT KDIST_HAVE_LIBFUZZER)
    add_executable(${_name}_replay ${_src} ${_fuzz_dir}/replay_main.cpp)
    target_link_libraries(${_name}_replay PRIVATE kdist_test_deps)
    add_test(NAME fuzz.${_short}.corpus COMMAND ${_name}_replay ${_corpus})
    set_tests_properties(fuzz.${_short}.corpus PROPERTIES PASS_REGULAR_EXPRESSION "no crash"
                         TIMEOUT 120)
  else()
    # The fuzzer itself replays the corpus (libFuzzer runs the files it is given once each), so
    # the same source is not compiled a second time under the sanitizers.
    add_executable(${_name} ${_src})
    target_link_libraries(${_name} PRIVATE kdist_test_deps)
    # ASan+UBSan here even in a build without KDIST_SANITIZE: a fuzzer finds memory errors.
    set(_san fuzzer)
    if(NOT KDIST_SANITIZE)
      set(_san fuzzer,address,undefined)
    endif()
    target_compile_options(${_name} PRIVATE -fsanitize=${_san} -fno-sanitize-recover=all)
    target_link_options(${_name} PRIVATE -fsanitize=${_san})
    # New inputs go to the build tree's corpus (the first directory); the committed corpus is read.
    set(_work ${CMAKE_CURRENT_BINARY_DIR}/fuzz/${_short})
    file(MAKE_DIRECTORY ${_work}/corpus ${_work}/artifacts)
    add_test(NAME fuzz.${_short}.smoke
             COMMAND ${_name} -max_total_time=${KDIST_FUZZ_SECONDS} -seed=1 -timeout=10
                     -rss_limit_mb=2048 -max_len=8192 -print_final_stats=1
                     -artifact_prefix=${_work}/artifacts/ ${_work}/corpus ${_corpus})
    set_tests_properties(fuzz.${_short}.smoke PROPERTIES
                         TIMEOUT 300 PASS_REGULAR_EXPRESSION "Done [0-9]+ runs")
    file(GLOB _corpus_files CONFIGURE_DEPENDS ${_corpus}/*)
    add_test(NAME fuzz.${_short}.corpus COMMAND ${_name} ${_corpus_files})
    set_tests_properties(fuzz.${_short}.corpus PROPERTIES
                         PASS_REGULAR_EXPRESSION "fuzzing was not performed" TIMEOUT 120)
  endif()
endforeach()
if(NOT KDIST_HAVE_LIBFUZZER)
  add_test(NAME fuzz.smoke.skipped COMMAND ${CMAKE_COMMAND} -E echo
           "no libFuzzer with ${CMAKE_CXX_COMPILER_ID}: the fuzz smoke runs are skipped (scripts/run-sanitizers.sh builds them with clang)")
  set_tests_properties(fuzz.smoke.skipped PROPERTIES SKIP_REGULAR_EXPRESSION "skipped")
endif()
