# Explicit instantiation (cmake/kdistInstances.cmake, docs/design.md): the GPT test program, which
# trains double GPTs, defines none of the members of kdist's model classes on double, and
# kdist_test_instances defines them all; so a class left out of the extern declarations, which
# CI would pay for in compile time, fails here.
get_property(_gpt_program GLOBAL PROPERTY KDIST_TEST_PROGRAM_mpi_test_gpt)  # tests/bundles.cmake
if(KDIST_EXPLICIT_INSTANTIATION AND _gpt_program)
  find_program(KDIST_NM NAMES nm llvm-nm REQUIRED)
  # "|" between them: a ";" would split the argument
  string(CONCAT _symbols "kdist::layers::BasicDense<double>::build(|"
                "kdist::layers::BasicMultiHeadAttention<double>::backward(|"
                "kdist::AnyLayer<double>::Model<kdist::layers::BasicLayerNormalization<double> >"
                "::forward(|kdist::BasicSequential<double>::compile(|"
                "kdist::BasicSequential<double>::fit(kdist::ArrayDataset|"
                "kdist::AnyLoss<double>::Model<kdist::losses::SparseCategoricalCrossentropy>::sum(|"
                "kdist::detail::BoxedOptimizer<double>::set_learning_rate(")
  add_test(NAME instances.programs_take_them_from_the_library
           COMMAND ${CMAKE_COMMAND} -DNM=${KDIST_NM} "-DPROGRAM=$<TARGET_OBJECTS:${_gpt_program}>"
                   "-DLIBRARY=$<TARGET_FILE:kdist_test_instances>" "-DSYMBOLS=${_symbols}"
                   -P ${CMAKE_CURRENT_SOURCE_DIR}/instances/check_instances.cmake)
endif()
