# cmake -DMPIEXEC=... -DTRAINER=... -DTEXT=... -DDIR=... -DMAPS=... -P run_gpt_meshes.cmake
# The GPT trainer (issue 20) on every 2-process mesh and sharding gives the same validation loss
# and the same sampled text as on (1, 2) with tensor parallelism only; and a run interrupted on
# (1, 2) and resumed on (2, 1) with FSDP ends as the uninterrupted one. The rules read from
# examples/layout_maps/gpt_fsdp_sequence_parallel.json (issue 22) train as the built-in ones.
file(REMOVE_RECURSE ${DIR})
set(_common --text ${TEXT} --blocks 1 --d-model 32 --heads 2 --seq 32 --steps 3 --batch-size 8
            --sample-tokens 16 --prompt "The ")
include(${CMAKE_CURRENT_LIST_DIR}/trainer_runs.cmake)
function(gpt_result out text)  # "Validation loss: X" and the sample, from a run's output
  string(REGEX MATCH "Validation loss: [0-9.]+\nSample[^\n]*\n[^\n]*" _r "${text}")
  if(NOT _r)
    message(FATAL_ERROR "no validation loss or sample in:\n${text}")
  endif()
  set(${out} "${_r}" PARENT_SCOPE)
endfunction()
run_trainer(_tp --mesh 1x2 --epochs 2 ${_common})
gpt_result(_want "${_tp}")
# Each variant is one string with its flags separated by '|' (a CMake list would flatten them).
set(_variants "--mesh|2x1" "--mesh|2x1|--fsdp" "--mesh|1x2|--sequence-parallel"
              "--mesh|1x2|--sequence-parallel|--fsdp")
if(MAPS)  # built with nlohmann-json: the rules from a file
  list(APPEND _variants "--mesh|2x1|--layout-map|${MAPS}/gpt_fsdp_sequence_parallel.json")
endif()
foreach(_joined IN LISTS _variants)
  string(REPLACE "|" ";" _variant "${_joined}")
  run_trainer(_out ${_variant} --epochs 2 ${_common})
  gpt_result(_got "${_out}")
  if(NOT _got STREQUAL _want)
    message(FATAL_ERROR "${_joined} differs from (1, 2):\n${_got}\n---\n${_want}")
  endif()
  message(STATUS "${_joined}: the same validation loss and sample")
endforeach()
# interrupted after epoch 1 on (1, 2), resumed on (2, 1) with FSDP
run_trainer(_first --mesh 1x2 --epochs 1 ${_common} --checkpoint-dir ${DIR})
if(NOT _first MATCHES "Saved [^\n]*checkpoint.h5 \\(epoch 1\\)")
  message(FATAL_ERROR "no checkpoint saved:\n${_first}")
endif()
run_trainer(_second --mesh 2x1 --fsdp --epochs 2 ${_common} --checkpoint-dir ${DIR} --resume)
if(NOT _second MATCHES "Resumed from [^\n]*checkpoint.h5: epoch 1, step 3 \\(saved by ModelParallel on")
  message(FATAL_ERROR "no resume line:\n${_second}")
endif()
gpt_result(_resumed "${_second}")
if(NOT _resumed STREQUAL _want)
  message(FATAL_ERROR "the resumed run differs:\n${_resumed}\n---\n${_want}")
endif()
# Keras weights: saved after training on (1, 2), loaded on (2, 1) with FSDP for 0 more epochs: the
# same validation loss and sample
run_trainer(_saved --mesh 1x2 --epochs 2 ${_common} --save-keras-weights ${DIR}/gpt.weights.h5)
if(NOT _saved MATCHES "Saved Keras weights to [^\n]*gpt.weights.h5")
  message(FATAL_ERROR "no Keras weights saved:\n${_saved}")
endif()
run_trainer(_loaded --mesh 2x1 --fsdp --evaluate-only ${_common}
            --load-keras-weights ${DIR}/gpt.weights.h5)
if(NOT _loaded MATCHES "Loaded Keras weights from [^\n]*gpt.weights.h5 \\(optimizer state: restored\\) at step 6")
  message(FATAL_ERROR "no Keras weights load line:\n${_loaded}")
endif()
gpt_result(_from_keras "${_loaded}")
if(NOT _from_keras STREQUAL _want)
  message(FATAL_ERROR "the Keras weights evaluated on (2, 1) differ:\n${_from_keras}\n---\n${_want}")
endif()
message(STATUS "gpt meshes agree")
