# cmake -DMPIEXEC=... -DTRAINER=... -DDIR=... [-DSHARDED=ON] -P run_resume.cmake
# A run interrupted and resumed on another mesh gives the uninterrupted run's results: 2 epochs
# on (1, 2) in one go, against 1 epoch on (1, 2) with a checkpoint, then --resume on (2, 1) for
# the second (the weights, optimizer state and step counter come from the checkpoint).
# SHARDED: the first epoch on (2, 1) with the optimizer state sharded over the data axis
# (KDIST_SHARD_OPTIMIZER_STATE=1, ZeRO-1), the uninterrupted run on (2, 1) without, the resume
# on (1, 2): a checkpoint saved from parts resumes whole.
file(REMOVE_RECURSE ${DIR})
set(_common --epochs 2 --steps 5 --batch-size 64)
include(${CMAKE_CURRENT_LIST_DIR}/trainer_runs.cmake)
set(_mesh 1x2)
set(_other 2x1)
if(SHARDED)
  set(_mesh 2x1)
  set(_other 1x2)
endif()
run_trainer(_whole --mesh ${_mesh} ${_common})
if(SHARDED)
  set(ENV{KDIST_SHARD_OPTIMIZER_STATE} 1)
endif()
run_trainer(_first --mesh ${_mesh} --epochs 1 --steps 5 --batch-size 64 --checkpoint-dir ${DIR})
unset(ENV{KDIST_SHARD_OPTIMIZER_STATE})
set(_sharded "d1/kernel [^\n]*optimizer state sharded: elements \\[0, 78400\\)")
if(SHARDED AND NOT _first MATCHES "${_sharded}")
  message(FATAL_ERROR "the optimizer state was not sharded:\n${_first}")
endif()
# The small variables are owned whole, the largest first to process 0 (which prints):
# d2/kernel (8000 bytes) here, d2/bias (40) on process 1.
set(_owned "d2/kernel [^\n]*elements \\[0, 2000\\)[^\n]*\n[^\n]*d2/bias [^\n]*optimizer state on another process")
if(SHARDED AND NOT _first MATCHES "${_owned}")
  message(FATAL_ERROR "the small variables' optimizer state was not owned whole:\n${_first}")
endif()
if(NOT _first MATCHES "Saved [^\n]*checkpoint.h5 \\(epoch 1\\)")
  message(FATAL_ERROR "no checkpoint saved:\n${_first}")
endif()
run_trainer(_second --mesh ${_other} ${_common} --checkpoint-dir ${DIR} --resume)
if(NOT _second MATCHES "Resumed from [^\n]*checkpoint.h5: epoch 1, step 5 \\(saved by ModelParallel on")
  message(FATAL_ERROR "no resume line:\n${_second}")
endif()
expect_same_test_metrics("the resumed run differs" "uninterrupted" "${_whole}"
                         "resumed on ${_other}" "${_second}")
message(STATUS "resume agrees")
