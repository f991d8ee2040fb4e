# The trainers as users run them: a short smoke run of each under mpiexec, and every bad input
# giving a clear error on every rank and a non-zero exit (never a hang).
if(NOT KDIST_ENABLE_EXAMPLES)
  return()
endif()
set(_mp $<TARGET_FILE:model_parallel_trainer>)
set(_dp $<TARGET_FILE:data_parallel_trainer>)
set(_run ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} 2)

add_test(NAME trainer.model_parallel.smoke COMMAND ${_run} ${_mp} --mesh 1x2 --epochs 1 --steps 20)
set_tests_properties(trainer.model_parallel.smoke PROPERTIES
  PASS_REGULAR_EXPRESSION "20/20 .*loss: [0-9.]+ - accuracy: [0-9.]+.*Test loss: [0-9.]+ - Test accuracy: 0\\.[5-9]")
add_test(NAME trainer.data_parallel.smoke COMMAND ${_run} ${_dp} --mesh 2 --epochs 1 --steps 20)
set_tests_properties(trainer.data_parallel.smoke PROPERTIES
  PASS_REGULAR_EXPRESSION "20/20 .*Test loss: [0-9.]+ - Test accuracy: 0\\.[5-9]")

# --help shows the trainer's options first, without Kokkos' 40 lines; --kokkos-help shows Kokkos'.
foreach(_trainer IN ITEMS model_parallel_trainer gpt_trainer)
  add_test(NAME trainer.help_shows_its_own_options.${_trainer}
           COMMAND sh -c "\"$@\" 2>&1 | head -n 3" sh $<TARGET_FILE:${_trainer}> --help)
  set_tests_properties(trainer.help_shows_its_own_options.${_trainer} PROPERTIES
    PASS_REGULAR_EXPRESSION "^usage: ${_trainer} " FAIL_REGULAR_EXPRESSION "Kokkos command line"
    TIMEOUT 60)
endforeach()
add_test(NAME trainer.kokkos_help_shows_kokkos_options COMMAND ${_mp} --kokkos-help --epochs 1 --steps 1)
set_tests_properties(trainer.kokkos_help_shows_kokkos_options PROPERTIES
  PASS_REGULAR_EXPRESSION "Kokkos command line arguments" TIMEOUT 60)

# name; expected message; command. Passes when the message is printed AND the run exits non-zero.
function(kdist_trainer_error name regex)
  add_test(NAME trainer.error.${name}
           COMMAND ${CMAKE_COMMAND} -E env ${_env} sh -c "\"$@\"; echo \"exit status $?\"" sh
                   ${_run} ${ARGN})
  set_tests_properties(trainer.error.${name} PROPERTIES
                       PASS_REGULAR_EXPRESSION "(${regex}).*exit status [1-9]"
                       TIMEOUT 60 RESOURCE_LOCK mpi)
endfunction()
set(_env KDIST_TRAINER_DUMMY=1)
kdist_trainer_error(mesh_does_not_parse "--mesh '2y2' does not parse" ${_mp} --mesh 2y2)
kdist_trainer_error(mesh_needs_two_extents "--mesh needs two extents" ${_mp} --mesh 2)
kdist_trainer_error(mesh_vs_processes "does not match the number of devices" ${_mp} --mesh 2x2)
kdist_trainer_error(batch_not_divisible "127.*2|2.*127" ${_dp} --mesh 2 --batch-size 127)
kdist_trainer_error(unknown_flag "not expected: .*--epoch" ${_mp} --epoch 3)
kdist_trainer_error(bad_optimizer "--optimizer: adamw not in" ${_mp} --optimizer adamw)
kdist_trainer_error(bad_keras_weights_dtype "--keras-weights-dtype: int8 not in"
                    ${_mp} --keras-weights-dtype int8)
kdist_trainer_error(epochs_not_an_integer "--epochs '1e30' is not a whole number in \\[1, 1000000\\]" ${_mp} --epochs 1e30)
kdist_trainer_error(negative_batch "--batch-size '-1' is not a whole number" ${_dp} --batch-size -1)
set(_env KDIST_FASHION_MNIST_DIR=/nonexistent/fashion)
kdist_trainer_error(missing_dataset "/nonexistent/fashion.*dataset-fashion-mnist" ${_mp} --mesh 1x2)

# The guide's mesh shapes at 8 processes give the same losses (more ranks than cores: slow, few steps).
add_test(NAME trainer.guide_meshes_agree
         COMMAND ${CMAKE_COMMAND} -DMPIEXEC=${MPIEXEC_EXECUTABLE} -DTRAINER=${_mp}
                 -P ${CMAKE_CURRENT_SOURCE_DIR}/run_guide_meshes.cmake)
set_tests_properties(trainer.guide_meshes_agree PROPERTIES PASS_REGULAR_EXPRESSION "guide meshes agree"
                     PROCESSORS 8 RESOURCE_LOCK mpi TIMEOUT 900)

# LayoutMap rules from JSON files (examples/layout_maps/): the same training as the built-in
# rules, another sharding resolved from a file, and a bad file a clear error.
if(TARGET nlohmann_json::nlohmann_json)  # kdist/io/layout_map_file.hpp is there
add_test(NAME trainer.layout_map_file
         COMMAND ${CMAKE_COMMAND} -DMPIEXEC=${MPIEXEC_EXECUTABLE} -DTRAINER=${_mp}
                 -DMAPS=${PROJECT_SOURCE_DIR}/examples/layout_maps -DDIR=${CMAKE_CURRENT_BINARY_DIR}
                 -P ${CMAKE_CURRENT_SOURCE_DIR}/run_layout_map_file.cmake)
set_tests_properties(trainer.layout_map_file PROPERTIES PASS_REGULAR_EXPRESSION "layout map files agree"
                     PROCESSORS 2 RESOURCE_LOCK mpi TIMEOUT 300)
file(WRITE ${CMAKE_CURRENT_BINARY_DIR}/bad_layout_map.json "{\"d1/kernel\": [null, \"modle\"]}\n")
set(_env KDIST_TRAINER_DUMMY=1)
kdist_trainer_error(layout_map_unknown_axis
  "bad_layout_map.json: rule \"d1/kernel\".*modle" ${_mp} --mesh 1x2 --layout-map ${CMAKE_CURRENT_BINARY_DIR}/bad_layout_map.json)
kdist_trainer_error(layout_map_missing "no_such_map.json: cannot open this LayoutMap file \\(no such file\\)"
  ${_mp} --mesh 1x2 --layout-map ${CMAKE_CURRENT_BINARY_DIR}/no_such_map.json)
kdist_trainer_error(layout_map_with_data_parallel "--layout-map: DataParallel shards only the batch"
  ${_dp} --mesh 2 --layout-map ${PROJECT_SOURCE_DIR}/examples/layout_maps/model_parallel_guide.json)
endif()

# The Conv2D trainer (the ModelParallel page's conv rules) and the notebook's three programs.
set(_conv $<TARGET_FILE:conv2d_trainer>)
add_test(NAME trainer.conv2d.smoke COMMAND ${_run} ${_conv} --mesh 1x2 --epochs 1 --steps 20)
set_tests_properties(trainer.conv2d.smoke PROPERTIES
  PASS_REGULAR_EXPRESSION "conv2d/kernel \\(3, 3, 1, 16\\) \\(None, None, None, 'model'\\).*20/20 .*Test loss: [0-9.]+ - Test accuracy: 0\\.[4-9]"
  PROCESSORS 2 RESOURCE_LOCK mpi TIMEOUT 300)
set(_seeds $<TARGET_FILE:seeds_programs>)
add_test(NAME example.seeds_programs.np2 COMMAND ${_run} ${_seeds})
set_tests_properties(example.seeds_programs.np2 PROPERTIES
  PASS_REGULAR_EXPRESSION "Epoch 3/3.*8/8 [^\n]* - loss: [0-9.]+.*a\\(\\) and b\\(\\): 2 runs, the same evaluate loss.*3 programs agree: yes"
  PROCESSORS 2 RESOURCE_LOCK mpi TIMEOUT 300)
# the four 8-device meshes of the notebook, 3 epochs each (about 20 s at 8 ranks on 2 cores)
add_test(NAME example.seeds_programs.np8
         COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} 8 ${_seeds} --program c --quiet)
set_tests_properties(example.seeds_programs.np8 PROPERTIES
  PASS_REGULAR_EXPRESSION "c\\(\\) on every mesh: 4 runs, the same evaluate loss.*4 programs agree: yes"
  PROCESSORS 8 RESOURCE_LOCK mpi TIMEOUT 900)
kdist_trainer_error(seeds_programs_bad_program "--program: d not in" ${_seeds} --program d)
add_test(NAME trainer.error.seeds_programs_no_mesh
         COMMAND sh -c "\"$@\"; echo \"exit status $?\"" sh
                 ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} 4 ${_seeds} --program c)
set_tests_properties(trainer.error.seeds_programs_no_mesh PROPERTIES
  PASS_REGULAR_EXPRESSION "no program runs on 4 processes; program c needs 2 or 8.*exit status [1-9]"
  PROCESSORS 4 RESOURCE_LOCK mpi TIMEOUT 120)

# Checkpoints (docs/checkpoints.md): an interrupted run resumed on another mesh ends as the
# uninterrupted one; the flags' misuse and a missing checkpoint are errors.
add_test(NAME trainer.checkpoint_resume_on_another_mesh
         COMMAND ${CMAKE_COMMAND} -DMPIEXEC=${MPIEXEC_EXECUTABLE} -DTRAINER=${_mp}
                 -DDIR=${CMAKE_CURRENT_BINARY_DIR}/resume_test
                 -P ${CMAKE_CURRENT_SOURCE_DIR}/run_resume.cmake)
set_tests_properties(trainer.checkpoint_resume_on_another_mesh PROPERTIES
  PASS_REGULAR_EXPRESSION "resume agrees" PROCESSORS 2 RESOURCE_LOCK mpi TIMEOUT 600)
# The same from a checkpoint saved with the optimizer state sharded (ZeRO-1, docs/multihost.md).
add_test(NAME trainer.checkpoint_resume_sharded_state
         COMMAND ${CMAKE_COMMAND} -DMPIEXEC=${MPIEXEC_EXECUTABLE} -DTRAINER=${_mp}
                 -DDIR=${CMAKE_CURRENT_BINARY_DIR}/resume_sharded_test -DSHARDED=ON
                 -P ${CMAKE_CURRENT_SOURCE_DIR}/run_resume.cmake)
set_tests_properties(trainer.checkpoint_resume_sharded_state PROPERTIES
  PASS_REGULAR_EXPRESSION "resume agrees" PROCESSORS 2 RESOURCE_LOCK mpi TIMEOUT 600)
# Keras weights files (docs/checkpoints.md): saved by one run, evaluated by another on another mesh.
add_test(NAME trainer.keras_weights_on_another_mesh
         COMMAND ${CMAKE_COMMAND} -DMPIEXEC=${MPIEXEC_EXECUTABLE} -DTRAINER=${_mp}
                 -DDIR=${CMAKE_CURRENT_BINARY_DIR}/keras_weights_test
                 -P ${CMAKE_CURRENT_SOURCE_DIR}/run_keras_weights.cmake)
set_tests_properties(trainer.keras_weights_on_another_mesh PROPERTIES
  PASS_REGULAR_EXPRESSION "keras weights agree" PROCESSORS 2 RESOURCE_LOCK mpi TIMEOUT 600)
# What was loaded is said (issue 35): --resume and --evaluate-only of a checkpoint print its path,
# epoch and step, --evaluate-only of a Keras weights file its path and step, even with --quiet.
set(_loaded_check [=[
rm -rf "$0"
"$@" --epochs 1 --steps 5 --checkpoint-dir "$0" --save-keras-weights "$0/mlp.weights.h5" > /dev/null || exit 1
"$@" --evaluate-only --checkpoint-dir "$0" --resume --quiet || exit 1
"$@" --evaluate-only --load-keras-weights "$0/mlp.weights.h5" --quiet || exit 1
]=])
add_test(NAME trainer.evaluate_only_says_what_it_loaded
         COMMAND sh -c "${_loaded_check}" ${CMAKE_CURRENT_BINARY_DIR}/evaluate_only_test
                 ${_run} ${_mp} --mesh 1x2)
set_tests_properties(trainer.evaluate_only_says_what_it_loaded PROPERTIES
  PASS_REGULAR_EXPRESSION "Loaded checkpoint [^\n]*evaluate_only_test/checkpoint.h5: epoch 1, step 5 \\(saved by ModelParallel on [^\n]*\nTest loss: [0-9.]+ - Test accuracy: [0-9.]+\nLoaded Keras weights from [^\n]*evaluate_only_test/mlp.weights.h5 \\(optimizer state: restored\\) at step 5 \\(a Keras weights file records no epoch\\)\nTest loss"
  PROCESSORS 2 RESOURCE_LOCK mpi TIMEOUT 300)
set(_env KDIST_TRAINER_DUMMY=1)
kdist_trainer_error(evaluate_only_needs_weights "--evaluate-only needs weights to evaluate"
                    ${_mp} --evaluate-only)
kdist_trainer_error(load_keras_weights_missing "no_such.weights.h5': no such file"
                    ${_mp} --load-keras-weights ${CMAKE_CURRENT_BINARY_DIR}/no_such.weights.h5)
kdist_trainer_error(resume_needs_a_directory "--resume needs --checkpoint-dir DIR" ${_mp} --resume)
kdist_trainer_error(resume_without_a_checkpoint "no_checkpoint_here/checkpoint.h5"
                    ${_mp} --checkpoint-dir ${CMAKE_CURRENT_BINARY_DIR}/no_checkpoint_here --resume)

# In-situ training (examples/in_situ/): 2 processes simulate the heat equation, 2 train a kdist
# surrogate on their own communicator from the snapshots sent in memory; a few seconds.
set(_in_situ $<TARGET_FILE:in_situ_heat_surrogate>)
add_test(NAME example.in_situ_heat_surrogate.np4
         COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} 4 ${_in_situ}
                 --checkpoint-dir ${CMAKE_CURRENT_BINARY_DIR}/in_situ_checkpoint)
set_tests_properties(example.in_situ_heat_surrogate.np4 PROPERTIES
  PASS_REGULAR_EXPRESSION "training on 2 processes \\(DataParallel\\), 2 simulating.*held-out \\(20 pairs of 2 episodes\\).*surrogate beats persistence 100x: yes.*reloads: held-out MSE [0-9.e+-]+ \\(the same\\)"
  FAIL_REGULAR_EXPRESSION "(^|\n)error: "
  PROCESSORS 4 RESOURCE_LOCK mpi TIMEOUT 120)
# In-situ training on the simulation's own blocks: 4 processes on a 2 x 2 grid, each simulating and
# training on its block (examples/in_situ/heat_blocks.cpp).
set(_in_situ_blocks $<TARGET_FILE:in_situ_heat_blocks>)
add_test(NAME example.in_situ_heat_blocks.np4
         COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} 4 ${_in_situ_blocks})
set_tests_properties(example.in_situ_heat_blocks.np4 PROPERTIES
  PASS_REGULAR_EXPRESSION "heat 32 x 32 on a 2 x 2 process grid.*held-out \\(8 pairs of 1 episodes\\).*surrogate beats persistence 100x: yes.*most View memory on a process"
  FAIL_REGULAR_EXPRESSION "(^|\n)error: "
  PROCESSORS 4 RESOURCE_LOCK mpi TIMEOUT 120)
add_test(NAME trainer.error.in_situ_blocks_nothing_to_train
         COMMAND sh -c "\"$@\"; echo \"exit status $?\"" sh
                 ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} 2 ${_in_situ_blocks} --episodes 3 --held-out 3)
set_tests_properties(trainer.error.in_situ_blocks_nothing_to_train PROPERTIES
  PASS_REGULAR_EXPRESSION "--held-out 3 leaves no episode of 3 to train on.*exit status [1-9]"
  PROCESSORS 2 RESOURCE_LOCK mpi TIMEOUT 60)
# A model designed in Keras (examples/keras_model_trainer.cpp; tests/data/keras_fashion_tiny.keras,
# written by Keras 3.15.1: scripts/keras/make_model_file_fixture.py): loaded with its optimizer's
# 2 steps, trained 5 more and saved as a Keras file, which the second test loads back.
if(TARGET keras_model_trainer)  # built with libzip
set(_keras_trainer $<TARGET_FILE:keras_model_trainer>)
set(_keras_trained ${CMAKE_CURRENT_BINARY_DIR}/keras_fashion_tiny_trained.keras)
add_test(NAME example.keras_model_trainer.np2
         COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} 2 ${_keras_trainer}
                 --model ${CMAKE_CURRENT_SOURCE_DIR}/data/keras_fashion_tiny.keras --max-steps 5
                 --batch-size 64 --out ${_keras_trained})
set_tests_properties(example.keras_model_trainer.np2 PROPERTIES
  PASS_REGULAR_EXPRESSION "keras_fashion_tiny.keras: 4 layers, input \\(28, 28, 1\\), Adam \\(iterations 2\\), loss sparse_categorical_crossentropy.*test loss before: .*test loss after: .*Saved "
  FAIL_REGULAR_EXPRESSION "(^|\n)error: "
  FIXTURES_SETUP keras_trained PROCESSORS 2 RESOURCE_LOCK mpi TIMEOUT 120)
add_test(NAME example.keras_model_trainer.reload
         COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} 1 ${_keras_trainer}
                 --model ${_keras_trained} --epochs 0)
set_tests_properties(example.keras_model_trainer.reload PROPERTIES
  PASS_REGULAR_EXPRESSION "Adam \\(iterations 7\\).*test loss before: "
  FAIL_REGULAR_EXPRESSION "(^|\n)error: "
  FIXTURES_REQUIRED keras_trained RESOURCE_LOCK mpi TIMEOUT 120)
add_test(NAME trainer.error.keras_model_input_shape
         COMMAND sh -c "\"$@\"; echo \"exit status $?\"" sh
                 ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} 2 ${_keras_trainer}
                 --model ${CMAKE_CURRENT_SOURCE_DIR}/data/keras_cnn.keras)
set_tests_properties(trainer.error.keras_model_input_shape PROPERTIES
  PASS_REGULAR_EXPRESSION "error: the model's input is \\(8, 8, 1\\); this trainer feeds Fashion-MNIST's.*exit status [1-9]"
  PROCESSORS 2 RESOURCE_LOCK mpi TIMEOUT 60)
endif()
add_test(NAME trainer.error.in_situ_one_process
         COMMAND sh -c "\"$@\"; echo \"exit status $?\"" sh
                 ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} 1 ${_in_situ})
set_tests_properties(trainer.error.in_situ_one_process PROPERTIES
  PASS_REGULAR_EXPRESSION "error: --sim-ranks is 0 of 1 processes; give each group at least one process.*exit status [1-9]"
  RESOURCE_LOCK mpi TIMEOUT 60)
add_test(NAME trainer.error.in_situ_nothing_to_train
         COMMAND sh -c "\"$@\"; echo \"exit status $?\"" sh
                 ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} 2 ${_in_situ} --episodes 3 --held-out 3)
set_tests_properties(trainer.error.in_situ_nothing_to_train PROPERTIES
  PASS_REGULAR_EXPRESSION "error: --held-out 3 leaves no episode of 3 to train on.*exit status [1-9]"
  PROCESSORS 2 RESOURCE_LOCK mpi TIMEOUT 60)
