# cmake -DMPIEXEC=... -DTRAINER=... -DMAPS=... -P run_layout_map_file.cmake
# model_parallel_trainer with --layout-map examples/layout_maps/model_parallel_guide.json (issue 22)
# resolves the variables to the file's layouts and trains exactly as with its built-in rules; a
# file that also shards d2 row-parallel (d2/kernel ("model", None)) shows that layout and still
# trains to the same metrics to the printed digits (the same model, another sharding).
include(${CMAKE_CURRENT_LIST_DIR}/trainer_runs.cmake)
set(_common --mesh 1x2 --epochs 1 --steps 10)
run_trainer(_builtin ${_common})
run_trainer(_file ${_common} --layout-map ${MAPS}/model_parallel_guide.json)
if(NOT _file MATCHES "d1/kernel \\(784, 200\\) \\(None, 'model'\\)")
  message(FATAL_ERROR "the file's layout of d1/kernel is not in the output:\n${_file}")
endif()
expect_same_test_metrics("the guide's map from a file trains as the built-in one"
                         built-in "${_builtin}" file "${_file}")
file(WRITE ${DIR}/row_parallel.json
     "{\"d1/kernel\": [null, \"model\"], \"d1/bias\": [\"model\"],\n"
     " \"d2/kernel\": [\"model\", null], \"d2/output\": [\"data\", null]}\n")
run_trainer(_row ${_common} --layout-map ${DIR}/row_parallel.json)
if(NOT _row MATCHES "d2/kernel \\(200, 10\\) \\('model', None\\)")
  message(FATAL_ERROR "the row-parallel d2/kernel is not in the output:\n${_row}")
endif()
expect_same_test_metrics("another sharding from a file trains the same model"
                         built-in "${_builtin}" row-parallel "${_row}")
message(STATUS "layout map files agree")
