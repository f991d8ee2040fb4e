#pragma once
//! \file kdist.hpp
//! Everything kdist offers, in one include.

#include <kdist/axis.hpp>
#include <kdist/collectives.hpp>
#include <kdist/data_parallel.hpp>
#include <kdist/data_sharding.hpp>
#include <kdist/dim_spec.hpp>
#include <kdist/distribute_tensor.hpp>
#include <kdist/distribution.hpp>
#include <kdist/error.hpp>
#include <kdist/layers/dense.hpp>
#include <kdist/layers/dropout.hpp>
#include <kdist/layout.hpp>
#include <kdist/layout_map.hpp>
#include <kdist/matmul.hpp>
#include <kdist/mesh.hpp>
#include <kdist/mesh_binding.hpp>
#include <kdist/mesh_communicators.hpp>
#include <kdist/model.hpp>
#include <kdist/model_parallel.hpp>
#include <kdist/mpi/agree.hpp>
#include <kdist/mpi/communicator.hpp>
#include <kdist/mpi/datatype.hpp>
#include <kdist/ops/activations.hpp>
#include <kdist/ops/backend.hpp>
#include <kdist/ops/dropout.hpp>
#include <kdist/ops/losses.hpp>
#include <kdist/ops/matmul.hpp>
#include <kdist/ops/optimizers.hpp>
#include <kdist/random.hpp>
#include <kdist/redistribute.hpp>
#include <kdist/runtime.hpp>
#include <kdist/runtime_layout.hpp>
#include <kdist/runtime_mesh.hpp>
#include <kdist/tensor.hpp>
#include <kdist/visualize_sharding.hpp>
