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
kdist_gpt_error(bad_preset "--preset is 'gpt3', not gpt2-small" --preset gpt3)
kdist_gpt_error(bad_matmul_precision "--matmul-precision is 'tf32', not one of highest"
                --matmul-precision tf32)
kdist_gpt_error(bad_peak_tflops "--peak-tflops '-1' is not a finite number > 0" --peak-tflops -1)
kdist_gpt_error(bad_remat "--remat: everything not in \\{full,activations,larger_than\\}"
                --remat everything)
kdist_gpt_error(bad_dtype_policy "Cannot convert 'mixed_int8' to a mixed precision DTypePolicy"
                --dtype-policy mixed_int8)
kdist_gpt_error(layout_map_with_fsdp "--layout-map replaces the built-in rules that --fsdp"
                --layout-map ${PROJECT_SOURCE_DIR}/examples/layout_maps/gpt_tensor_parallel.json --fsdp)

# --remat full (issue 37): the blocks' activations recomputed in backward, the same losses to the
# last printed digit as without (gradients are bit-identical: tests/mpi/test_remat.cpp).
add_test(NAME trainer.gpt.remat_full_gives_the_same_losses
         COMMAND sh -c "a=$(\"$@\" 2>&1 | grep -o 'loss [0-9.]* - val_loss [0-9.]*'); \
                        b=$(\"$@\" --remat full 2>&1 | grep -o 'loss [0-9.]* - val_loss [0-9.]*'); \
                        echo \"without: $a\"; echo \"with: $b\"; \
                        [ -n \"$a\" ] && [ \"$a\" = \"$b\" ] && echo 'remat losses agree'" sh
                 ${_run2} ${_gpt} --mesh 2x1 --text ${_text} ${_tiny})
set_tests_properties(trainer.gpt.remat_full_gives_the_same_losses PROPERTIES
  PASS_REGULAR_EXPRESSION "remat losses agree" PROCESSORS 2 RESOURCE_LOCK mpi TIMEOUT 300)

# --dtype-policy mixed_bfloat16 and bfloat16 (issue 37): 16-bit activations, float32 variables,
# or 16-bit variables and slots too; the first epoch's loss within 1% of float32's
# (tests/mpi/test_mixed_precision.cpp checks the GPT's within 1% on three rule sets).
add_test(NAME trainer.gpt.bfloat16_policies_train_close_to_float32
         COMMAND sh -c "a=$(\"$@\" 2>&1 | grep -o ' loss [0-9.]*' | head -1 | grep -o '[0-9.]*$'); \
                        b=$(\"$@\" --dtype-policy mixed_bfloat16 2>&1 | grep -o ' loss [0-9.]*' | head -1 | grep -o '[0-9.]*$'); \
                        c=$(\"$@\" --dtype-policy bfloat16 2>&1 | grep -o ' loss [0-9.]*' | head -1 | grep -o '[0-9.]*$'); \
                        echo \"float32: $a mixed_bfloat16: $b bfloat16: $c\"; \
                        awk -v a=\"$a\" -v b=\"$b\" -v c=\"$c\" 'BEGIN { d = a - b; if (d < 0) d = -d; \
                          e = a - c; if (e < 0) e = -e; \
                          if (a > 0 && d <= 0.01 * a && e <= 0.01 * a) print \"bfloat16 losses agree\" }'" sh
                 ${_run2} ${_gpt} --mesh 2x1 --text ${_text} ${_tiny})
set_tests_properties(trainer.gpt.bfloat16_policies_train_close_to_float32 PROPERTIES
  PASS_REGULAR_EXPRESSION "bfloat16 losses agree" PROCESSORS 2 RESOURCE_LOCK mpi TIMEOUT 300)

# GPT-2 small's shape (issue 36): the preset sets d_model 768 and 12 heads (flags given win: one
# block of sequence 16 here); each epoch prints its model TFLOP/s and, given the peak, its MFU.
add_test(NAME trainer.gpt.gpt2_small_preset_and_mfu
         COMMAND ${_gpt} --preset gpt2-small --blocks 1 --seq 16 --steps 1 --batch-size 2
                 --text ${_text} --sample-tokens 0 --peak-tflops 1000 --matmul-precision high)
set_tests_properties(trainer.gpt.gpt2_small_preset_and_mfu PROPERTIES
  PASS_REGULAR_EXPRESSION "1 blocks, d_model 768, 12 heads, sequence 16.*model FLOPs: [0-9.]+ MFLOP per token \\(forward and backward\\); float32 products on a GPU: high.*epoch 1: loss [0-9.]+ - val_loss [0-9.]+ - [0-9]+ tokens/s, [0-9.]+ TFLOP/s, MFU [0-9.]+%"
  RESOURCE_LOCK mpi TIMEOUT 300)

# The GPT's map passes its own checks (issue 35). The README's tensor-parallel command: the map
# declares the GPT's row-parallel kernels (attention_output, down), so the report warns of no
# contracted-dimension sharding; the same when the rules come from a file.
set(_no_warning "contracted-dimension sharding \\(warning\\)|shard a contracted dimension")
add_test(NAME trainer.gpt.map_declares_its_row_parallel_kernels
         COMMAND ${_run2} ${_gpt} --mesh 1x2 --text ${_text} ${_tiny} --sample-tokens 0)
set_tests_properties(trainer.gpt.map_declares_its_row_parallel_kernels PROPERTIES
  PASS_REGULAR_EXPRESSION "parameters\nLayoutMap: 8 variable\\(s\\) of rank 1 \\(biases, norms\\) match no rule: replicated\nEpoch 1/1.*Validation loss"
  FAIL_REGULAR_EXPRESSION "${_no_warning}" PROCESSORS 2 RESOURCE_LOCK mpi TIMEOUT 120)
# FSDP on (2, 1): the kernels whose contracted dimension is sharded over "data" are gathered
# before use on purpose: one information line, no warning.
add_test(NAME trainer.gpt.fsdp_gathers_are_one_information_line
         COMMAND ${_run2} ${_gpt} --mesh 2x1 --fsdp --text ${_text} ${_tiny} --sample-tokens 0)
set_tests_properties(trainer.gpt.fsdp_gathers_are_one_information_line PROPERTIES
  PASS_REGULAR_EXPRESSION "\nFSDP: 5 kernels shard their contracted dimension over 'data' and are gathered over it before use \\(expected\\)\nEpoch 1/1.*Validation loss"
  FAIL_REGULAR_EXPRESSION "${_no_warning}" PROCESSORS 2 RESOURCE_LOCK mpi TIMEOUT 120)
# --strict-layout-map: the built-in rules name every variable of rank >= 2 (the run trains) ...
add_test(NAME trainer.gpt.strict_layout_map_builtin_rules
         COMMAND ${_run2} ${_gpt} --mesh 1x2 --strict-layout-map --text ${_text} ${_tiny}
                 --sample-tokens 0)
set_tests_properties(trainer.gpt.strict_layout_map_builtin_rules PROPERTIES
  PASS_REGULAR_EXPRESSION "epoch 1: loss [0-9.]+.*Validation loss" FAIL_REGULAR_EXPRESSION "(^|\n)error: "
  PROCESSORS 2 RESOURCE_LOCK mpi TIMEOUT 120)
if(TARGET nlohmann_json::nlohmann_json)  # --layout-map FILE
  add_test(NAME trainer.gpt.map_file_declares_its_row_parallel_kernels
           COMMAND ${_run2} ${_gpt} --mesh 1x2 --text ${_text} ${_tiny} --sample-tokens 0
                   --layout-map ${PROJECT_SOURCE_DIR}/examples/layout_maps/gpt_tensor_parallel.json)
  set_tests_properties(trainer.gpt.map_file_declares_its_row_parallel_kernels PROPERTIES
    PASS_REGULAR_EXPRESSION "layout_map \\(keras-hub style, from [^\n]*gpt_tensor_parallel.json\\).*Validation loss"
    FAIL_REGULAR_EXPRESSION "${_no_warning}" PROCESSORS 2 RESOURCE_LOCK mpi TIMEOUT 120)
  # ... and a file that leaves kernels unmatched is ONE error naming each, on every process
  file(WRITE ${CMAKE_CURRENT_BINARY_DIR}/gpt_partial_map.json
       "{\"token_embedding/embeddings\": [\"model\", null],\n \".*mha/(query|key|value)/kernel\": [null, \"model\", null],\n \".*up/kernel\": [null, \"model\"]}\n")
  kdist_gpt_error(strict_layout_map_unmatched
    "kdist::LayoutMap \\(strict\\): 7 variable\\(s\\) of rank 2 or more match no rule: 'position_embedding/embeddings' \\(32, 32\\), 'block0/mha/query/bias' \\(2, 16\\).*'block0/mha/attention_output/kernel' \\(2, 16, 32\\), 'block0/down/kernel' \\(128, 32\\), 'lm_head/kernel' \\(32, 256\\)[^,]"
    --mesh 1x2 --text ${_text} ${_tiny} --strict-layout-map
    --layout-map ${CMAKE_CURRENT_BINARY_DIR}/gpt_partial_map.json)
endif()

# The sample shows every sampled byte: the prompt's 4 and 64 generated, each printable ASCII (or a
# newline or tab) as it is and any other byte as \xNN (a backslash as \\); nothing raw, nothing cut
# at a zero byte (the tiny model samples all 256 byte values).
set(_sample_check [=[
"$@" > "$0.out" || exit 1
sed -n '/^Sample (/,$p' "$0.out" | tail -n +2 > "$0.sample"
raw=$(LC_ALL=C tr -d ' -~\n\t' < "$0.sample" | wc -c)
units=$(LC_ALL=C sed -E 's/\\(x[0-9a-f]{2}|\\)/#/g' "$0.sample" | wc -c)
escaped=$(grep -o '\\x[0-9a-f][0-9a-f]' "$0.sample" | wc -l)
echo "sample: $units bytes and newline, $raw raw, $escaped escaped"
]=])
add_test(NAME trainer.gpt.sample_shows_every_byte
         COMMAND sh -c "${_sample_check}" ${CMAKE_CURRENT_BINARY_DIR}/gpt_sample
                 ${_run2} ${_gpt} --mesh 1x2 --text ${_text} ${_tiny} --sample-tokens 64)
set_tests_properties(trainer.gpt.sample_shows_every_byte PROPERTIES
  PASS_REGULAR_EXPRESSION "sample: 69 bytes and newline, 0 raw, [1-9][0-9]* escaped"
  PROCESSORS 2 RESOURCE_LOCK mpi TIMEOUT 120)

# What was loaded is said: --resume (path, epoch, step), --evaluate-only of a checkpoint and of a
# Keras weights file, even with --quiet.
set(_loaded_check [=[
rm -rf "$0"
"$@" --epochs 1 --checkpoint-dir "$0" > /dev/null || exit 1
"$@" --epochs 2 --checkpoint-dir "$0" --resume --save-keras-weights "$0/gpt.weights.h5" || exit 1
"$@" --evaluate-only --checkpoint-dir "$0" --resume --quiet || exit 1
"$@" --evaluate-only --load-keras-weights "$0/gpt.weights.h5" --quiet || exit 1
]=])
add_test(NAME trainer.gpt.says_what_it_loaded
         COMMAND sh -c "${_loaded_check}" ${CMAKE_CURRENT_BINARY_DIR}/gpt_loaded_test
                 ${_run2} ${_gpt} --mesh 1x2 --text ${_text} ${_tiny} --sample-tokens 0)
set_tests_properties(trainer.gpt.says_what_it_loaded PROPERTIES
  PASS_REGULAR_EXPRESSION "Resumed from [^\n]*gpt_loaded_test/checkpoint.h5: epoch 1, step 3 \\(saved by ModelParallel on [^\n]*\n.*Loaded checkpoint [^\n]*gpt_loaded_test/checkpoint.h5: epoch 2, step 6 \\(saved by ModelParallel on [^\n]*\nValidation loss: [0-9.]+\nLoaded Keras weights from [^\n]*gpt_loaded_test/gpt.weights.h5 \\(optimizer state: restored\\) at step 6 \\(a Keras weights file records no epoch\\)\nValidation loss"
  PROCESSORS 2 RESOURCE_LOCK mpi TIMEOUT 300)
