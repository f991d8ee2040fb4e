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
