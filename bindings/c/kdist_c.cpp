// kdist's C API (bindings/c/kdist.h), compiled once into libkdist_c: every template a C or
// Fortran caller needs is instantiated here, on float models (kdist::Sequential).
//
// Each entry point runs its work in `guarded`, which turns kdist's exceptions into a status and
// keeps the message for kdist_last_error. Handles are owned by the library and remembered, so that
// kdist_finalize frees what the caller did not (Kokkos must not end with Views alive) and a stale
// or foreign handle is an error, not a crash.
#include "kdist.h"

#include <Kokkos_Core.hpp>
#include <algorithm>
#include <cstring>
#include <kdist/io/checkpoint.hpp>
#include <kdist/io/keras_model_file.hpp>
#include <kdist/io/keras_weights.hpp>
#include <kdist/io/layout_map_file.hpp>
#include <kdist/kdist.hpp>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <vector>

struct kdist_distribution_s {
  std::shared_ptr<const kdist::Distribution> dist;
};

struct kdist_model_s {
  kdist::Sequential model;
  // A GPU build's device copies of host arrays, and predict's output (kept: the same shapes every
  // step allocate once).
  Kokkos::View<float*> x_copy, y_copy, out_copy;
  Kokkos::View<std::int32_t*> labels_copy;
};

namespace {

thread_local std::string last_error;

//! A caller's mistake the C++ API cannot make (a null pointer, a stale handle).
struct InvalidArgument : std::invalid_argument {
  using std::invalid_argument::invalid_argument;
};
struct NotInitialized : std::logic_error {
  using std::logic_error::logic_error;
};

struct State {
  bool initialized = false;
  std::set<kdist_model_s*> models;
  std::set<kdist_distribution_s*> distributions;
};
State& state() {
  static State s;
  return s;
}

template <class F>
int guarded(const char* function, F&& f) {
  try {
    last_error.clear();
    f();
    return KDIST_OK;
  } catch (const InvalidArgument& e) {
    last_error = std::string(function) + ": " + e.what();
    return KDIST_INVALID_ARGUMENT;
  } catch (const NotInitialized& e) {
    last_error = std::string(function) + ": " + e.what();
    return KDIST_NOT_INITIALIZED;
  } catch (const kdist::ValueError& e) {
    last_error = e.what();
    return KDIST_VALUE_ERROR;
  } catch (const kdist::Error& e) {
    last_error = e.what();
    return KDIST_RUNTIME_ERROR;
  } catch (const std::exception& e) {
    last_error = std::string(function) + ": " + e.what();
    return KDIST_INTERNAL_ERROR;
  } catch (...) {
    last_error = std::string(function) + ": an unknown exception";
    return KDIST_INTERNAL_ERROR;
  }
}

void require_initialized() {
  if (!state().initialized) {
    throw NotInitialized("kdist is not initialized; call kdist_initialize(comm) first");
  }
}

template <class P>
void require_pointer(const P* p, const char* what) {
  if (p == nullptr) throw InvalidArgument(std::string(what) + " is NULL");
}

kdist_model_s& model_of(kdist_model m) {
  require_initialized();
  if (m == nullptr || state().models.count(m) == 0) {
    throw InvalidArgument(m == nullptr ? "the model is NULL"
                                       : "not a live kdist_model (freed, or never made by kdist)");
  }
  return *m;
}

std::shared_ptr<const kdist::Distribution> distribution_of(kdist_distribution d) {
  require_initialized();
  if (d == nullptr || state().distributions.count(d) == 0) {
    throw InvalidArgument(d == nullptr
                              ? "the distribution is NULL (make one with kdist_data_parallel)"
                              : "not a live kdist_distribution (freed, or never made by kdist)");
  }
  return d->dist;
}

kdist_model adopt(kdist::Sequential model) {
  auto* m = new kdist_model_s{std::move(model), {}, {}, {}, {}};
  state().models.insert(m);
  return m;
}

std::vector<std::size_t> extents_of(int rank, const std::int64_t* shape, const char* what) {
  if (rank < 1) throw InvalidArgument(std::string(what) + "'s rank must be at least 1");
  require_pointer(shape, (std::string(what) + "'s shape").c_str());
  std::vector<std::size_t> out;
  for (int d = 0; d < rank; ++d) {
    if (shape[d] < 0) {
      throw InvalidArgument(std::string(what) + "'s extent " + std::to_string(d) + " is " +
                            std::to_string(shape[d]) + "; extents are at least 0");
    }
    out.push_back(static_cast<std::size_t>(shape[d]));
  }
  return out;
}

std::size_t product(const std::vector<std::size_t>& e, std::size_t from = 0) {
  std::size_t n = 1;
  for (std::size_t d = from; d < e.size(); ++d) n *= e[d];
  return n;
}

using DeviceSpace = Kokkos::DefaultExecutionSpace::memory_space;
constexpr bool device_is_host =
    Kokkos::SpaceAccessibility<Kokkos::HostSpace, DeviceSpace>::accessible;
template <class DataType>
using Unmanaged = Kokkos::View<DataType, Kokkos::LayoutRight, DeviceSpace,
                               Kokkos::MemoryTraits<Kokkos::Unmanaged>>;

//! `n` values at `p` (array `what`) as device memory: in place when they are there (or the device
//! is the host), else copied into `copy` (grown when too small).
template <class V>
typename V::value_type* on_device(const typename V::value_type* p, std::size_t n, int memory,
                                  V& copy, const char* what) {
  using E = typename V::value_type;
  if (memory != KDIST_MEMORY_HOST && memory != KDIST_MEMORY_DEVICE) {
    throw InvalidArgument("memory must be KDIST_MEMORY_HOST or KDIST_MEMORY_DEVICE");
  }
  if (n > 0) require_pointer(p, what);  // an empty block may be NULL
  if (device_is_host || memory == KDIST_MEMORY_DEVICE) return const_cast<E*>(p);
  if (copy.extent(0) < n)
    copy = V(Kokkos::view_alloc(Kokkos::WithoutInitializing, std::string("kdist_c::") + what), n);
  Kokkos::deep_copy(
      Kokkos::subview(copy, std::pair<std::size_t, std::size_t>(0, n)),
      Kokkos::View<const E*, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>(p, n));
  return copy.data();
}

//! Calls f(x) with `x` as a rank-2, -4 or -5 View (the model's input ranks) of `p`.
template <class F>
void with_input(const std::vector<std::size_t>& e, float* p, F&& f) {
  switch (e.size()) {
    case 2:
      return f(Unmanaged<float**>(p, e[0], e[1]));
    case 4:
      return f(Unmanaged<float****>(p, e[0], e[1], e[2], e[3]));
    case 5:
      return f(Unmanaged<float*****>(p, e[0], e[1], e[2], e[3], e[4]));
    default:
      throw kdist::ValueError("kdist: x has rank " + std::to_string(e.size()) +
                              "; give (rows, features), (rows, height, width, channels) or "
                              "(rows, depth, height, width, channels)");
  }
}

void check_global_batch(std::int64_t global_batch) {
  if (global_batch < 1) {
    throw InvalidArgument("global_batch is " + std::to_string(global_batch) +
                          "; it counts the rows of every model replica, at least 1");
  }
}

//! One step on regression targets (train: with the update).
double step_on_targets(kdist_model m, const float* x, int x_rank, const std::int64_t* x_shape,
                       const float* y, int y_rank, const std::int64_t* y_shape,
                       std::int64_t global_batch, int memory, bool train) {
  auto& h = model_of(m);
  const auto xe = extents_of(x_rank, x_shape, "x");
  const auto ye = extents_of(y_rank, y_shape, "y");
  check_global_batch(global_batch);
  if (ye[0] != xe[0]) {
    throw kdist::ValueError("kdist: y has " + std::to_string(ye[0]) + " rows and x " +
                            std::to_string(xe[0]) + "; give one row of targets per row of x");
  }
  float* xd = on_device(x, product(xe), memory, h.x_copy, "x");
  float* yd = on_device(y, product(ye), memory, h.y_copy, "y");
  const Unmanaged<float**> targets(yd, ye[0], product(ye, 1));
  double loss = 0;
  with_input(xe, xd, [&](const auto& xv) {
    const auto gb = static_cast<std::size_t>(global_batch);
    loss = train ? h.model.train_step(xv, targets, gb).loss
                 : h.model.evaluate_batch(xv, targets, gb).loss;
  });
  return loss;
}

}  // namespace

extern "C" {

const char* kdist_last_error(void) {
  return last_error.c_str();
}

int kdist_initialize(MPI_Comm comm) {
  return guarded("kdist_initialize", [&] {
    if (state().initialized) {
      throw InvalidArgument("kdist is initialized already; call kdist_finalize first");
    }
    int mpi = 0;
    MPI_Initialized(&mpi);
    if (!mpi) {
      throw NotInitialized(
          "MPI is not initialized; call MPI_Init_thread (MPI_THREAD_MULTIPLE) before "
          "kdist_initialize");
    }
    // Kokkos, when kdist starts it, runs until the program exits (Kokkos cannot start twice):
    // kdist_finalize ends kdist on `comm`, and a later kdist_initialize starts it again.
    kdist::initialize(comm);
    state().initialized = true;
  });
}

int kdist_initialize_fortran(MPI_Fint comm) {
  return kdist_initialize(MPI_Comm_f2c(comm));
}

int kdist_finalize(void) {
  return guarded("kdist_finalize", [&] {
    require_initialized();
    for (auto* m : state().models) delete m;
    for (auto* d : state().distributions) delete d;
    state().models.clear();
    state().distributions.clear();
    kdist::detail::runtime::release_communicator();
    state().initialized = false;
  });
}

int kdist_process_id(int* id) {
  return guarded("kdist_process_id", [&] {
    require_initialized();
    require_pointer(id, "id");
    *id = static_cast<int>(kdist::process_id());
  });
}

int kdist_process_count(int* count) {
  return guarded("kdist_process_count", [&] {
    require_initialized();
    require_pointer(count, "count");
    *count = static_cast<int>(kdist::process_count());
  });
}

int kdist_data_parallel(kdist_distribution* out) {
  return guarded("kdist_data_parallel", [&] {
    require_initialized();
    require_pointer(out, "out");
    auto* d = new kdist_distribution_s{std::make_shared<kdist::DataParallel>()};
    state().distributions.insert(d);
    *out = d;
  });
}

int kdist_model_parallel(int mesh_rank, const int64_t* mesh_shape, const char* axis_names,
                         const char* layout_map_json, const char* batch_dim_name,
                         kdist_distribution* out) {
  return guarded("kdist_model_parallel", [&] {
    require_initialized();
    require_pointer(out, "out");
    require_pointer(axis_names, "axis_names");
    require_pointer(layout_map_json, "layout_map_json");
    const auto shape = extents_of(mesh_rank, mesh_shape, "the mesh");
    std::vector<std::string> names;
    std::stringstream list(axis_names);
    for (std::string name; std::getline(list, name, ',');) names.push_back(name);
    if (names.size() != shape.size()) {
      throw kdist::ValueError("kdist_model_parallel: " + std::to_string(names.size()) +
                              " axis names ('" + axis_names + "') for a mesh of " +
                              std::to_string(shape.size()) +
                              " axes; give one comma-separated name per axis");
    }
    kdist::RuntimeDeviceMesh mesh(shape, names, kdist::list_devices());
    auto map = kdist::layout_map_from_json(layout_map_json, mesh, "kdist_model_parallel's rules");
    std::optional<std::string> batch;
    if (batch_dim_name != nullptr && *batch_dim_name != '\0') batch = batch_dim_name;
    auto* d = new kdist_distribution_s{
        std::make_shared<kdist::ModelParallel>(std::move(map), std::move(batch))};
    state().distributions.insert(d);
    *out = d;
  });
}

int kdist_distribution_free(kdist_distribution dist) {
  return guarded("kdist_distribution_free", [&] {
    if (dist == nullptr) return;
    distribution_of(dist);
    state().distributions.erase(dist);
    delete dist;
  });
}

int kdist_model_load(const char* path, kdist_distribution dist, uint64_t seed, kdist_model* out) {
  return guarded("kdist_model_load", [&] {
    auto d = distribution_of(dist);
    require_pointer(path, "path");
    require_pointer(out, "out");
    *out = adopt(kdist::load_model<float>(path, d, {.seed = seed}));
  });
}

int kdist_model_from_json(const char* json, kdist_distribution dist, uint64_t seed,
                          kdist_model* out) {
  return guarded("kdist_model_from_json", [&] {
    auto d = distribution_of(dist);
    require_pointer(json, "json");
    require_pointer(out, "out");
    *out = adopt(kdist::model_from_json<float>(json, d, seed));
  });
}

int kdist_model_free(kdist_model model) {
  return guarded("kdist_model_free", [&] {
    if (model == nullptr) return;
    model_of(model);
    state().models.erase(model);
    delete model;
  });
}

int kdist_model_input_shape(kdist_model model, int64_t* shape, int capacity, int* rank) {
  return guarded("kdist_model_input_shape", [&] {
    auto& h = model_of(model);
    require_pointer(rank, "rank");
    const auto& s = h.model.input_shape();
    *rank = static_cast<int>(s.size());
    if (capacity < *rank) {
      throw InvalidArgument("room for " + std::to_string(capacity) + " extents; the input has " +
                            std::to_string(s.size()));
    }
    require_pointer(shape, "shape");
    for (std::size_t d = 0; d < s.size(); ++d) shape[d] = static_cast<int64_t>(s[d]);
  });
}

int kdist_model_output_size(kdist_model model, int64_t* size) {
  return guarded("kdist_model_output_size", [&] {
    auto& h = model_of(model);
    require_pointer(size, "size");
    *size = static_cast<int64_t>(product(h.model.output_shape()));
  });
}

int kdist_model_input_rows(kdist_model model, int64_t global_batch, int64_t* first,
                           int64_t* count) {
  return guarded("kdist_model_input_rows", [&] {
    auto& h = model_of(model);
    require_pointer(first, "first");
    require_pointer(count, "count");
    check_global_batch(global_batch);
    const auto layout = h.model.input_layout(static_cast<std::size_t>(global_batch));
    kdist::Shape shape{static_cast<std::size_t>(global_batch)};
    for (const auto e : h.model.input_shape()) shape.push_back(e);
    const auto device = static_cast<std::size_t>(kdist::process_id());
    *first = static_cast<int64_t>(layout.offsets(shape, device)[0]);
    *count = static_cast<int64_t>(layout.local_extents(shape, device)[0]);
  });
}

int kdist_model_train_step(kdist_model model, const float* x, int x_rank, const int64_t* x_shape,
                           const float* y, int y_rank, const int64_t* y_shape, int64_t global_batch,
                           int memory, double* loss) {
  return guarded("kdist_model_train_step", [&] {
    require_pointer(loss, "loss");
    *loss =
        step_on_targets(model, x, x_rank, x_shape, y, y_rank, y_shape, global_batch, memory, true);
  });
}

int kdist_model_test_step(kdist_model model, const float* x, int x_rank, const int64_t* x_shape,
                          const float* y, int y_rank, const int64_t* y_shape, int64_t global_batch,
                          int memory, double* loss) {
  return guarded("kdist_model_test_step", [&] {
    require_pointer(loss, "loss");
    *loss =
        step_on_targets(model, x, x_rank, x_shape, y, y_rank, y_shape, global_batch, memory, false);
  });
}

int kdist_model_train_step_labels(kdist_model model, const float* x, int x_rank,
                                  const int64_t* x_shape, const int32_t* labels,
                                  int64_t global_batch, int memory, double* loss,
                                  double* accuracy) {
  return guarded("kdist_model_train_step_labels", [&] {
    auto& h = model_of(model);
    const auto xe = extents_of(x_rank, x_shape, "x");
    require_pointer(loss, "loss");
    check_global_batch(global_batch);
    float* xd = on_device(x, product(xe), memory, h.x_copy, "x");
    std::int32_t* ld = on_device(labels, xe[0], memory, h.labels_copy, "labels");
    const Unmanaged<std::int32_t*> targets(ld, xe[0]);
    with_input(xe, xd, [&](const auto& xv) {
      const auto m = h.model.train_step(xv, targets, static_cast<std::size_t>(global_batch));
      *loss = m.loss;
      if (accuracy != nullptr) *accuracy = m.accuracy;
    });
  });
}

int kdist_model_predict(kdist_model model, const float* x, int x_rank, const int64_t* x_shape,
                        int64_t global_batch, int memory, float* out, int64_t out_size) {
  return guarded("kdist_model_predict", [&] {
    auto& h = model_of(model);
    const auto xe = extents_of(x_rank, x_shape, "x");
    check_global_batch(global_batch);
    const std::size_t values = xe[0] * product(h.model.output_shape());
    if (out_size < 0 || static_cast<std::size_t>(out_size) < values) {
      throw kdist::ValueError("kdist_model_predict: out holds " + std::to_string(out_size) +
                              " floats; the output of " + std::to_string(xe[0]) + " rows is " +
                              std::to_string(values) + " (rows x kdist_model_output_size)");
    }
    if (values > 0) require_pointer(out, "out");
    float* xd = on_device(x, product(xe), memory, h.x_copy, "x");
    with_input(xe, xd, [&](const auto& xv) {
      const auto y = h.model.predict_step(xv, static_cast<std::size_t>(global_batch));
      std::visit(
          [&](const auto& t) {
            // this process's rows, every value of each (the output gathered off other axes)
            const auto& s = t.shape();
            const auto rows =
                kdist::redistribute(t, h.model.distribution().get_data_layout(
                                           std::vector<std::size_t>(s.begin(), s.end())));
            const auto& block = rows.local();
            if (block.size() != values) {
              throw kdist::ValueError(
                  "kdist_model_predict: this process holds " + std::to_string(block.size()) +
                  " output values for " + std::to_string(xe[0]) +
                  " rows of x; give this process's rows of the batch (kdist_model_input_rows)");
            }
            // Keras' predict: probabilities where kdist kept a final softmax's logits (fused)
            if (h.out_copy.extent(0) < values) {
              h.out_copy = Kokkos::View<float*>(
                  Kokkos::view_alloc(Kokkos::WithoutInitializing, std::string("kdist_c::predict")),
                  values);
            }
            const Unmanaged<float*> values_of(h.out_copy.data(), values);
            Kokkos::deep_copy(
                values_of,
                Kokkos::View<const float*, DeviceSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>(
                    block.data(), values));
            if (h.model.predicts_logits()) {
              const std::size_t n = xe[0];
              kdist::ops::softmax_inplace(
                  Unmanaged<float**>(values_of.data(), n, n == 0 ? 0 : values / n));
            }
            if (memory == KDIST_MEMORY_DEVICE) {
              Kokkos::deep_copy(Unmanaged<float*>(out, values), values_of);
            } else {
              Kokkos::deep_copy(
                  Kokkos::View<float*, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>(
                      out, values),
                  values_of);
            }
          },
          y);
    });
  });
}

int kdist_model_save(kdist_model model, const char* path) {
  return guarded("kdist_model_save", [&] {
    auto& h = model_of(model);
    require_pointer(path, "path");
    kdist::save_model(h.model, path);
  });
}

int kdist_model_save_weights(kdist_model model, const char* path) {
  return guarded("kdist_model_save_weights", [&] {
    auto& h = model_of(model);
    require_pointer(path, "path");
    kdist::save_keras_weights(h.model, path);
  });
}

int kdist_model_load_weights(kdist_model model, const char* path) {
  return guarded("kdist_model_load_weights", [&] {
    auto& h = model_of(model);
    require_pointer(path, "path");
    kdist::load_keras_weights(h.model, path);
  });
}

int kdist_model_save_checkpoint(kdist_model model, const char* path) {
  return guarded("kdist_model_save_checkpoint", [&] {
    auto& h = model_of(model);
    require_pointer(path, "path");
    kdist::save_checkpoint(h.model, path);
  });
}

int kdist_model_load_checkpoint(kdist_model model, const char* path) {
  return guarded("kdist_model_load_checkpoint", [&] {
    auto& h = model_of(model);
    require_pointer(path, "path");
    kdist::load_checkpoint(h.model, path);
  });
}

int kdist_model_to_json(kdist_model model, char* buffer, int64_t capacity, int64_t* length) {
  return guarded("kdist_model_to_json", [&] {
    auto& h = model_of(model);
    require_pointer(length, "length");
    const std::string text = kdist::model_to_json(h.model);
    *length = static_cast<int64_t>(text.size());
    if (capacity > *length) {
      require_pointer(buffer, "buffer");
      std::memcpy(buffer, text.c_str(), text.size() + 1);
    }
  });
}

int kdist_model_iterations(kdist_model model, int64_t* iterations) {
  return guarded("kdist_model_iterations", [&] {
    auto& h = model_of(model);
    require_pointer(iterations, "iterations");
    *iterations = h.model.iterations();
  });
}

int kdist_model_set_learning_rate(kdist_model model, double learning_rate) {
  return guarded("kdist_model_set_learning_rate", [&] {
    auto& h = model_of(model);
    if (!(learning_rate >= 0)) {
      throw kdist::ValueError("kdist_model_set_learning_rate: " + std::to_string(learning_rate) +
                              " is not a learning rate; give a number at least 0");
    }
    h.model.set_learning_rate(learning_rate);
  });
}

}  // extern "C"
