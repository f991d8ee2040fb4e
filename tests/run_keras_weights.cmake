# cmake -DMPIEXEC=... -DTRAINER=... -DDIR=... -P run_keras_weights.cmake
# Weights written as a Keras .weights.h5 file by one run load into another run on another mesh:
# a trainer trains on (1, 2) and saves with --save-keras-weights; a second one evaluates that file
# with --load-keras-weights --evaluate-only on (2, 1) and reports the same test loss and accuracy.
file(REMOVE_RECURSE ${DIR})
file(MAKE_DIRECTORY ${DIR})
include(${CMAKE_CURRENT_LIST_DIR}/trainer_runs.cmake)
set(_file ${DIR}/mlp.weights.h5)
run_trainer(_trained --mesh 1x2 --epochs 1 --steps 5 --batch-size 64 --save-keras-weights ${_file})
if(NOT _trained MATCHES "Saved Keras weights to [^\n]*mlp.weights.h5")
  message(FATAL_ERROR "no Keras weights saved:\n${_trained}")
endif()
run_trainer(_loaded --mesh 2x1 --batch-size 64 --load-keras-weights ${_file} --evaluate-only)
if(NOT _loaded MATCHES "Loaded Keras weights from [^\n]*mlp.weights.h5 \\(optimizer state: restored\\)")
  message(FATAL_ERROR "no load line:\n${_loaded}")
endif()
expect_same_test_metrics("the loaded weights evaluate differently" "trained on (1, 2)" "${_trained}" "loaded on (2, 1)" "${_loaded}")
message(STATUS "keras weights agree")
