#pragma once
//! \file kdist.hpp
//! Everything kdist offers, in one include, but io/ (checkpoints and Keras weights need parallel
//! HDF5: include <kdist/io/checkpoint.hpp> / <kdist/io/keras_weights.hpp> and link kdist::io).
//! The groups follow the layers, bottom to top (docs/design.md).

// core/: meshes, layouts, their value forms, plans (std only)
#include <kdist/core/axis.hpp>
#include <kdist/core/bfloat16.hpp>
#include <kdist/core/concepts.hpp>
#include <kdist/core/dim_spec.hpp>
#include <kdist/core/error.hpp>
#include <kdist/core/float16.hpp>
#include <kdist/core/halo_plan.hpp>
#include <kdist/core/layout.hpp>
#include <kdist/core/layout_axes.hpp>
#include <kdist/core/matmul_plan.hpp>
#include <kdist/core/mesh.hpp>
#include <kdist/core/pending_sum.hpp>
#include <kdist/core/redistribute_plan.hpp>
#include <kdist/core/runtime_concepts.hpp>
#include <kdist/core/runtime_layout.hpp>
#include <kdist/core/runtime_mesh.hpp>

// parallel/: start-up, processes and devices, communicators, collectives
#include <kdist/parallel/bfloat16_all_reduce.hpp>
#include <kdist/parallel/collective_request.hpp>
#include <kdist/parallel/collective_timeout.hpp>
#include <kdist/parallel/collectives.hpp>
#include <kdist/parallel/concepts.hpp>
#include <kdist/parallel/devices.hpp>
#include <kdist/parallel/halo_exchange.hpp>
#include <kdist/parallel/initialize.hpp>
#include <kdist/parallel/mesh_binding.hpp>
#include <kdist/parallel/mesh_communicators.hpp>
#include <kdist/parallel/mpi/agree.hpp>
#include <kdist/parallel/mpi/communicator.hpp>
#include <kdist/parallel/mpi/datatype.hpp>
#include <kdist/parallel/mpi/gpu_aware.hpp>
#include <kdist/parallel/profiling_region.hpp>
#include <kdist/parallel/run.hpp>
#include <kdist/parallel/step_scope.hpp>
#include <kdist/parallel/stream_channel.hpp>
#include <kdist/parallel/world.hpp>

// ops/: local kernels
#include <kdist/ops/activations.hpp>
#include <kdist/ops/attention.hpp>
#include <kdist/ops/attention_tiled.hpp>
#include <kdist/ops/backend.hpp>
#include <kdist/ops/concatenate.hpp>
#include <kdist/ops/conv2d.hpp>
#include <kdist/ops/convolution.hpp>
#include <kdist/ops/dropout.hpp>
#include <kdist/ops/elementwise.hpp>
#include <kdist/ops/embedding.hpp>
#include <kdist/ops/layer_norm.hpp>
#include <kdist/ops/losses.hpp>
#include <kdist/ops/matmul.hpp>
#include <kdist/ops/matmul_precision.hpp>
#include <kdist/ops/optimizers.hpp>
#include <kdist/ops/pooling.hpp>
#include <kdist/ops/random.hpp>
#include <kdist/ops/shifted_copy.hpp>
#include <kdist/ops/sparse_cross_entropy.hpp>
#include <kdist/ops/upsampling.hpp>

// tensor/: distributed tensors
#include <kdist/tensor/allocation_counters.hpp>
#include <kdist/tensor/cast.hpp>
#include <kdist/tensor/distribute_tensor.hpp>
#include <kdist/tensor/from_local_blocks.hpp>
#include <kdist/tensor/matmul.hpp>
#include <kdist/tensor/redistribute.hpp>
#include <kdist/tensor/reusable_views.hpp>
#include <kdist/tensor/tensor.hpp>
#include <kdist/tensor/view_arena.hpp>
#include <kdist/tensor/visualize_sharding.hpp>

// strategy/: LayoutMap and the distributions
#include <kdist/strategy/data_parallel.hpp>
#include <kdist/strategy/data_sharding.hpp>
#include <kdist/strategy/distribution.hpp>
#include <kdist/strategy/layout_map.hpp>
#include <kdist/strategy/layout_map_report.hpp>
#include <kdist/strategy/model_parallel.hpp>
#include <kdist/strategy/runtime_layout_map.hpp>

// nn/: layers, optimizers, losses, models, datasets
#include <kdist/nn/apply_gradient.hpp>
#include <kdist/nn/array_dataset.hpp>
#include <kdist/nn/autocast.hpp>
#include <kdist/nn/device_checks.hpp>
#include <kdist/nn/dtype_policy.hpp>
#include <kdist/nn/explicit_instantiation.hpp>
#include <kdist/nn/gradients.hpp>
#include <kdist/nn/layer.hpp>
#include <kdist/nn/layer_buffers.hpp>
#include <kdist/nn/layer_tensor.hpp>
#include <kdist/nn/layers/activation.hpp>
#include <kdist/nn/layers/concatenate.hpp>
#include <kdist/nn/layers/conv2d.hpp>
#include <kdist/nn/layers/conv_transpose.hpp>
#include <kdist/nn/layers/convolution.hpp>
#include <kdist/nn/layers/dense.hpp>
#include <kdist/nn/layers/dropout.hpp>
#include <kdist/nn/layers/embedding.hpp>
#include <kdist/nn/layers/flatten.hpp>
#include <kdist/nn/layers/layer_normalization.hpp>
#include <kdist/nn/layers/multi_head_attention.hpp>
#include <kdist/nn/layers/pooling.hpp>
#include <kdist/nn/layers/position_embedding.hpp>
#include <kdist/nn/layers/residual.hpp>
#include <kdist/nn/layers/spatial_halos.hpp>
#include <kdist/nn/layers/spatial_window.hpp>
#include <kdist/nn/layers/upsampling.hpp>
#include <kdist/nn/loss.hpp>
#include <kdist/nn/loss_scale_optimizer.hpp>
#include <kdist/nn/model.hpp>
#include <kdist/nn/optimizer.hpp>
#include <kdist/nn/progress.hpp>
#include <kdist/nn/remat.hpp>
#include <kdist/nn/reservoir.hpp>
#include <kdist/nn/shape.hpp>
#include <kdist/nn/sixteen_bit_variables.hpp>
#include <kdist/nn/sparse_categorical_crossentropy.hpp>
#include <kdist/nn/streaming_dataset.hpp>
#include <kdist/nn/train/device_iterations.hpp>
#include <kdist/nn/train/epoch_loop.hpp>
#include <kdist/nn/train/gradient_clipping.hpp>
#include <kdist/nn/train/gradient_sync.hpp>
#include <kdist/nn/train/metrics.hpp>
#include <kdist/nn/train/optimizer_state.hpp>
#include <kdist/nn/train/optimizer_state_shards.hpp>
#include <kdist/nn/train/output_loss.hpp>
#include <kdist/nn/train/step_graph.hpp>
#include <kdist/nn/train/train_step.hpp>
#include <kdist/nn/variable.hpp>
#include <kdist/nn/weight_gather.hpp>
