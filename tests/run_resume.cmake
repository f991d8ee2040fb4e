# cmake -DMPIEXEC=... -DTRAINER=... -DDIR=... -P run_resume.cmake
# A run interrupted and resumed on another mesh gives the uninterrupted run's results: 2 epochs
# on (1, 2) in one go, against 1 epoch on (1, 2) with a checkpoint, then --resume on (2, 1) for
# the second (the weights, optimizer state and step counter come from the checkpoint).
file(REMOVE_RECURSE ${DIR})
set(_common --epochs 2 --steps 5 --batch-size 64)
include(${CMAKE_CURRENT_LIST_DIR}/trainer_runs.cmake)
run_trainer(_whole --mesh 1x2 ${_common})
run_trainer(_first --mesh 1x2 --epochs 1 --steps 5 --batch-size 64 --checkpoint-dir ${DIR})
if(NOT _first MATCHES "Saved [^\n]*checkpoint.h5 \\(epoch 1\\)")
  message(FATAL_ERROR "no checkpoint saved:\n${_first}")
endif()
run_trainer(_second --mesh 2x1 ${_common} --checkpoint-dir ${DIR} --resume)
if(NOT _second MATCHES "Resumed from [^\n]*checkpoint.h5: epoch 1, step 5 \\(saved by ModelParallel on")
  message(FATAL_ERROR "no resume line:\n${_second}")
endif()
expect_same_test_metrics("the resumed run differs" "uninterrupted" "${_whole}" "resumed on (2, 1)" "${_second}")
message(STATUS "resume agrees")
