# The GPT trainer (examples/gpt_trainer.cpp, issue 20) as users run it: a smoke run on Debian's
# fortunes (skipped where the package is not installed), the same results on every mesh and
# sharding and after a resume on another mesh (run_gpt_meshes.cmake), and each bad input a clear
# error with a non-zero exit. The runs train on docs/design.md (English text in the repository)
# with a tiny model: a few seconds each.
if(NOT KDIST_ENABLE_EXAMPLES)
  return()
endif()
set(_gpt $<TARGET_FILE:gpt_trainer>)
set(_text ${PROJECT_SOURCE_DIR}/docs/design.md)
set(_tiny --blocks 1 --d-model 32 --heads 2 --seq 32 --steps 3 --batch-size 8)
set(_run2 ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} 2)

add_test(NAME trainer.gpt.smoke_on_fortunes
         COMMAND sh -c "if [ -d /usr/share/games/fortunes ]; then \"$@\"; else echo 'skipped: no /usr/share/games/fortunes (apt-get install fortunes)'; fi" sh
                 ${_run2} ${_gpt} --mesh 1x2 ${_tiny} --sample-tokens 8)
set_tests_properties(trainer.gpt.smoke_on_fortunes PROPERTIES
  PASS_REGULAR_EXPRESSION "epoch 1: loss [0-9.]+ - val_loss [0-9.]+ - [0-9]+ tokens/s.*Sample"
  SKIP_REGULAR_EXPRESSION "skipped: no /usr/share/games/fortunes"
  PROCESSORS 2 RESOURCE_LOCK mpi TIMEOUT 300)
set(_gpt_maps)  # with nlohmann-json, also the rules read from a file
if(TARGET nlohmann_json::nlohmann_json)
  set(_gpt_maps -DMAPS=${PROJECT_SOURCE_DIR}/examples/layout_maps)
endif()
add_test(NAME trainer.gpt.same_on_every_mesh_and_after_resume
         COMMAND ${CMAKE_COMMAND} -DMPIEXEC=${MPIEXEC_EXECUTABLE} -DTRAINER=${_gpt} -DTEXT=${_text}
                 -DDIR=${CMAKE_CURRENT_BINARY_DIR}/gpt_resume_test
                 ${_gpt_maps}
                 -P ${CMAKE_CURRENT_SOURCE_DIR}/run_gpt_meshes.cmake)
set_tests_properties(trainer.gpt.same_on_every_mesh_and_after_resume PROPERTIES
  PASS_REGULAR_EXPRESSION "gpt meshes agree" PROCESSORS 2 RESOURCE_LOCK mpi TIMEOUT 600)

# name; expected message; flags. Passes when the message is printed AND the run exits non-zero.
function(kdist_gpt_error name regex)
  add_test(NAME trainer.gpt.error.${name}
           COMMAND sh -c "\"$@\"; echo \"exit status $?\"" sh ${_run2} ${_gpt} ${ARGN})
  set_tests_properties(trainer.gpt.error.${name} PROPERTIES
                       PASS_REGULAR_EXPRESSION "(${regex}).*exit status [1-9]"
                       TIMEOUT 120 RESOURCE_LOCK mpi)
endfunction()
file(WRITE ${CMAKE_CURRENT_BINARY_DIR}/gpt_short.txt "far too short")
kdist_gpt_error(text_missing "--text [^ ]*no_such.txt: no such file" --text ${CMAKE_CURRENT_BINARY_DIR}/no_such.txt)
kdist_gpt_error(text_too_short "too few for a training and a validation split"
                --text ${CMAKE_CURRENT_BINARY_DIR}/gpt_short.txt)
kdist_gpt_error(heads_do_not_divide_d_model "d_model 30 is not a multiple of its 4 heads"
                --text ${_text} --d-model 30 --heads 4)
kdist_gpt_error(heads_do_not_divide_the_model_axis "block0/mha/query/kernel.*model"
                --text ${_text} --mesh 1x2 --d-model 24 --heads 3 --seq 16)
kdist_gpt_error(resume_needs_a_directory "--resume needs --checkpoint-dir DIR" --resume)
kdist_gpt_error(evaluate_only_needs_weights "--evaluate-only needs weights" --evaluate-only)
kdist_gpt_error(keras_weights_missing "no_such.weights.h5"
                --text ${_text} --load-keras-weights ${CMAKE_CURRENT_BINARY_DIR}/no_such.weights.h5)
kdist_gpt_error(bad_validation_split "--validation-split must be below 1" --validation-split 1.5)
kdist_gpt_error(layout_map_with_fsdp "--layout-map replaces the built-in rules that --fsdp"
                --layout-map ${PROJECT_SOURCE_DIR}/examples/layout_maps/gpt_tensor_parallel.json --fsdp)
