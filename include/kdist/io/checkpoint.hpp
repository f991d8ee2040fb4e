#pragma once
//! \file io/checkpoint.hpp
//! `kdist::save_checkpoint(model, path)` and `kdist::load_checkpoint(model, path)`: a model's
//! weights, optimizer state and step counter in one parallel HDF5 file, written and read by every
//! process at once, each moving only its own block (the full tensor is never gathered anywhere).
//! A checkpoint saved on one mesh and layout loads on any other (DataParallel into ModelParallel,
//! (2, 4) into (1, 8), uneven blocks): each process reads the part of each dataset that its block
//! under the model's current layout covers.
//!
//! \code
//! auto history = model.fit(data, {.epochs = 5});
//! kdist::save_checkpoint(model, "run/ckpt.h5", {.epoch = 5, .loss = history.epochs.back().loss});
//! // later, on any mesh: build and compile the same model (same seed), then
//! auto saved = kdist::load_checkpoint(model, "run/ckpt.h5");
//! model.fit(data, {.epochs = 10, .initial_epoch = saved.epoch});  // epochs 6 to 10
//! \endcode
//!
//! The format, its guarantees and the resharding rules: docs/checkpoints.md. In short, under the
//! root group of one HDF5 file:
//!  - `/variables/<path>`: one dataset per variable at its Keras path ("d1/kernel" is dataset
//!    `kernel` in group `/variables/d1`), of the variable's global shape, in its dtype: float32 or
//!    float64, or for a variable of the "bfloat16" and "float16" policies (its value exactly)
//!    bfloat16 as Keras writes it (2-byte opaque values, attribute `dtype` = "bfloat16") or IEEE
//!    half; a float32 model loads any of them (16-bit values widened, and rounded to a 16-bit
//!    variable's dtype);
//!  - `/optimizer/<path>/slot<k>`: the optimizer's state of that variable, k = 0 .. slots - 1,
//!    shaped like it and in its dtype, in the order the optimizer declares its slots (`slots()`; Adam: momentum,
//!    velocity; RMSprop: velocity, [average_gradient], [momentum]; SGD with momentum: momentum;
//!    the user's optimizer: its own);
//!  - attributes: `format` = "kdist-checkpoint 1", `dtype`, `step`, `epoch`, `seed`, `loss`,
//!    `loss_function`, `distribution`, `mesh`, `mesh_shape`, `mesh_axis_names`, `variables` on
//!    `/`; `name`, `iterations`, `slot_count` and the hyperparameters on `/optimizer`; `shape`,
//!    `dtype` and `layout` (as saved) on each dataset.
//! A save writes `<path>.tmp-<pid>` and renames it to `<path>` once complete and flushed, so a save
//! killed midway leaves the previous checkpoint intact. Every dataset carries a checksum (chunks
//! with HDF5's Fletcher32 filter; attributes in checksummed HDF5 1.8 object headers) that loads
//! check (docs/checkpoints.md, "Checksums").

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include <mpi.h>
#include <Kokkos_Core.hpp>

#include <kdist/core/detail/python_repr.hpp>
#include <kdist/core/error.hpp>
#include <kdist/io/detail/background_writes.hpp>
#include <kdist/io/detail/hdf5.hpp>
#include <kdist/io/detail/io_watch.hpp>
#include <kdist/io/detail/parallel_hdf5_io.hpp>
#include <kdist/nn/model.hpp>
#include <kdist/parallel/collectives.hpp>
#include <kdist/parallel/mpi/agree.hpp>

namespace kdist {

//! The format a checkpoint's `format` attribute names; load_checkpoint reads this one only.
inline constexpr std::string_view checkpoint_format = "kdist-checkpoint 1";

//! What a save records besides the model: where training stands. The values of process 0 are
//! written (pass the same everywhere; fit's History is the same on every process).
struct CheckpointInfo {
  //! Epochs completed: resume with `FitOptions::initial_epoch = epoch`.
  std::size_t epoch = 0;
  //! The last epoch's loss, for the record (NaN: not given).
  double loss = std::numeric_limits<double>::quiet_NaN();
};

//! What load_checkpoint found in the file (the same on every process).
struct LoadedCheckpoint {
  std::size_t epoch = 0;  //!< CheckpointInfo::epoch of the save: fit's `initial_epoch`
  double loss = std::numeric_limits<double>::quiet_NaN();  //!< CheckpointInfo::loss of the save
  std::int64_t step = 0;     //!< the optimizer's iterations, now the model's
  std::uint64_t seed = 0;    //!< the seed the saved model was compiled with
  std::string optimizer;     //!< the optimizer's name(): "SGD", "Adam", "RMSprop" or the user's
  std::string distribution;  //!< "DataParallel", "ModelParallel", ... of the save
  std::string mesh;          //!< the mesh of the save, as the model printed it
  //! A LossScaleOptimizer's scale and step counter, restored into the model (0 for others).
  double loss_scale = 0;
  std::int64_t loss_scale_step_counter = 0;
};

namespace detail::checkpoint {

inline std::string variable_dataset(const std::string& path) {
  return "variables/" + path;
}
inline std::string slot_dataset(const std::string& path, std::size_t k) {
  return "optimizer/" + path + "/slot" + std::to_string(k);
}

//! What the model expects of a file: the checks of a load, made by process 0.
struct Expected {
  struct Entry {
    std::string dataset;  // "variables/d1/kernel"
    std::string what;     // "variable 'd1/kernel'"
    std::vector<std::size_t> shape;
  };
  std::string dtype;
  OptimizerRecord optimizer;
  std::vector<std::string> variables;
  std::vector<Entry> entries;
};

//! Checks `path` against `want` on this process alone (process 0). Returns "" when the file is a
//! checkpoint the model can load, with `out` filled; else the error's message.
inline std::string check_file(const std::string& path, const Expected& want,
                              LoadedCheckpoint& out) {
  const std::string who = "kdist::load_checkpoint: '" + path + "'";
  hdf5::QuietErrors quiet;
  hdf5::File file;
  const std::string expected_format(checkpoint_format);
  const FileKind kind{"a checkpoint", "a checkpoint file", "kdist::save_checkpoint",
                      "so not a kdist checkpoint (expected a file written by "
                      "kdist::save_checkpoint, format '" +
                          expected_format + "')"};
  if (auto problem = open_to_check(path, who, kind, file); !problem.empty()) return problem;
  const hid_t root = file.get();
  if (H5Aexists(root, "format") < 0) {  // (a checksum of the metadata did not match)
    return who + " is corrupt: the attributes of '/' cannot be read (HDF5: " + hdf5::error_text() +
           "); restore the file from a copy, or load an earlier checkpoint";
  }
  std::string format;
  if (!hdf5::read_string(root, "format", format)) {
    return who + " is an HDF5 file but not a kdist checkpoint: it has no attribute format = '" +
           expected_format + "'";
  }
  if (format != expected_format) {
    return who + " has format '" + format + "', which this kdist does not read (it reads '" +
           expected_format + "')";
  }
  const auto damaged = [&](const std::string& what) {
    return who + ": " + what + " is missing or of the wrong type; the checkpoint is damaged";
  };
  std::string dtype;
  std::int64_t step = 0;
  std::uint64_t epoch = 0, seed = 0;
  double loss = 0;
  std::vector<std::string> variables;
  if (!hdf5::read_string(root, "dtype", dtype)) return damaged("attribute 'dtype' of '/'");
  if (!hdf5::read_scalar(root, "step", step)) return damaged("attribute 'step' of '/'");
  if (!hdf5::read_scalar(root, "epoch", epoch)) return damaged("attribute 'epoch' of '/'");
  if (!hdf5::read_scalar(root, "seed", seed)) return damaged("attribute 'seed' of '/'");
  if (!hdf5::read_scalar(root, "loss", loss)) return damaged("attribute 'loss' of '/'");
  if (!hdf5::read_strings(root, "variables", variables)) {
    return damaged("attribute 'variables' of '/'");
  }
  if (dtype != want.dtype) {
    return who + ": the checkpoint holds " + dtype + " values but the model is " + want.dtype +
           "; load it into a model of " + dtype + " (kdist::BasicSequential<" +
           (dtype == "float64" ? "double" : "float") + ">)";
  }
  // the same variables, by path
  for (const auto& v : want.variables) {
    if (std::find(variables.begin(), variables.end(), v) == variables.end()) {
      return who + ": the model's variable '" + v + "' is not in the checkpoint, which holds " +
             detail::join_quoted(variables) + "; the checkpoint is of another model";
    }
  }
  for (const auto& v : variables) {
    if (std::find(want.variables.begin(), want.variables.end(), v) == want.variables.end()) {
      return who + ": the checkpoint holds variable '" + v + "', which the model does not have " +
             "(the model's variables: " + detail::join_quoted(want.variables) +
             "); the checkpoint is of another model";
    }
  }
  // the optimizer
  if (!hdf5::path_exists(root, "optimizer")) return damaged("group '/optimizer'");
  hdf5::Group opt(H5Gopen2(root, "optimizer", H5P_DEFAULT));
  std::string name;
  std::uint64_t slots = 0;
  if (!opt.valid() || !hdf5::read_string(opt.get(), "name", name)) {
    return damaged("attribute 'name' of '/optimizer'");
  }
  if (!hdf5::read_scalar(opt.get(), "slot_count", slots)) {
    return damaged("attribute 'slot_count' of '/optimizer'");
  }
  if (name != want.optimizer.name) {
    return who + ": the checkpoint was saved with optimizer " + name +
           " but the model is compiled with " + want.optimizer.name +
           "; compile the model with the checkpoint's optimizer";
  }
  if (want.optimizer.loss_scaled()) {  // the inner optimizers must agree too, and the scale is read
    std::string inner;
    if (!hdf5::read_string(opt.get(), "inner_optimizer", inner) ||
        !hdf5::read_scalar(opt.get(), "loss_scale", out.loss_scale) ||
        !hdf5::read_scalar(opt.get(), "loss_scale_step_counter", out.loss_scale_step_counter)) {
      return damaged("the loss scale's attributes of '/optimizer'");
    }
    if (inner != want.optimizer.inner_name) {
      return who + ": the checkpoint's LossScaleOptimizer wraps " + inner +
             " but the model's wraps " + want.optimizer.inner_name +
             "; compile the model with the checkpoint's optimizer";
    }
  }
  if (slots != want.optimizer.slot_count) {
    return who + ": the checkpoint's " + name + " keeps " + std::to_string(slots) +
           " slot(s) per variable but the model's keeps " +
           std::to_string(want.optimizer.slot_count) +
           " (another momentum, centered or nesterov setting); compile the model with the "
           "checkpoint's optimizer settings";
  }
  // every dataset: present, a float of the model's width (a float32 model's also 16 bits: its
  // 16-bit variables and their slots, or values that load widened), the model's shape
  const std::size_t width = want.dtype == "float32" ? 0 : 8;
  for (const auto& e : want.entries) {
    const auto p = check_float_dataset(root, e.dataset, e.what, e.shape, width, "checkpoint");
    if (!p.empty()) {
      return who + ": " + p.text +
             (p.other_shape ? "; the checkpoint is of another model"
                            : "; the checkpoint is damaged");
    }
  }
  std::string distribution, mesh;
  hdf5::read_string(root, "distribution", distribution);
  hdf5::read_string(root, "mesh", mesh);
  out.epoch = static_cast<std::size_t>(epoch);
  out.loss = loss;
  out.step = step;
  out.seed = seed;
  out.optimizer = name;
  out.distribution = distribution;
  out.mesh = mesh;
  return {};
}

//! What a save records besides the tensors: the attributes of `/` and `/optimizer`, taken from the
//! model when the save starts (an asynchronous save writes them later, from this copy).
struct Metadata {
  std::string dtype;
  std::int64_t step = 0;
  std::uint64_t epoch = 0;
  std::uint64_t seed = 0;
  double loss = 0;
  std::string loss_function;
  std::string distribution;
  std::string mesh;
  std::vector<std::uint64_t> mesh_shape;
  std::vector<std::string> mesh_axis_names;
  std::vector<std::string> variables;
  OptimizerRecord optimizer;
};

template <class Model>
Metadata metadata_of(Model& model, const OptimizerRecord& opt, std::uint64_t epoch, double loss) {
  Metadata m;
  m.dtype = dtype_name<typename Model::value_type>();
  m.step = model.iterations();
  m.epoch = epoch;
  m.seed = model.seed();
  m.loss = loss;
  m.loss_function = model.loss().name();
  m.distribution = model.distribution().name();
  const RuntimeDeviceMesh& mesh = model.distribution().device_mesh();
  m.mesh = mesh.to_string();
  m.mesh_shape.assign(mesh.shape().begin(), mesh.shape().end());
  m.mesh_axis_names = mesh.axis_names();
  model.for_each_variable([&](auto& v) { m.variables.push_back(v.path); });
  m.optimizer = opt;
  return m;
}

//! What every save starts with (save_checkpoint, AsyncCheckpointer::save; `who` names it): the
//! model compiled, one path on every process, process 0's epoch and loss everywhere (what each
//! process writes as attributes must agree). Returns the save's Metadata. Collective.
template <class Model>
Metadata start_save(Model& model, const std::string& path, const CheckpointInfo& info,
                    const char* who) {
  require_compiled(model, who);
  require_same_path(path, who);
  std::uint64_t epoch = info.epoch;
  double loss = info.loss;
  kdist::broadcast(epoch, 0, kdist::communicator());
  kdist::broadcast(loss, 0, kdist::communicator());
  return metadata_of(model, describe(model.optimizer()), epoch, loss);
}

//! The attributes of `/` and `/optimizer` (every process, the same values: collective metadata).
inline void write_metadata(hid_t root, const Metadata& m) {
  hdf5::write_string(root, "format", std::string(checkpoint_format));
  hdf5::write_string(root, "dtype", m.dtype);
  hdf5::write_scalar<std::int64_t>(root, "step", m.step);
  hdf5::write_scalar<std::uint64_t>(root, "epoch", m.epoch);
  hdf5::write_scalar<std::uint64_t>(root, "seed", m.seed);
  hdf5::write_scalar<double>(root, "loss", m.loss);
  hdf5::write_string(root, "loss_function", m.loss_function);
  hdf5::write_string(root, "distribution", m.distribution);
  hdf5::write_string(root, "mesh", m.mesh);
  hdf5::write_array(root, "mesh_shape", m.mesh_shape);
  hdf5::write_strings(root, "mesh_axis_names", m.mesh_axis_names);
  hdf5::write_strings(root, "variables", m.variables);
  hdf5::Group g(hdf5::check(H5Gcreate2(root, "optimizer", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
                            "H5Gcreate2 'optimizer'"));
  const OptimizerRecord& opt = m.optimizer;
  hdf5::write_string(g.get(), "name", opt.name);
  hdf5::write_scalar<std::int64_t>(g.get(), "iterations", m.step);
  hdf5::write_scalar<std::uint64_t>(g.get(), "slot_count", opt.slot_count);
  hdf5::write_strings(g.get(), "slot_names", opt.slot_names);
  for (const auto& [k, v] : opt.hyperparameters) {
    hdf5::write_scalar<double>(g.get(), k.c_str(), v);
  }
  if (opt.loss_scaled()) {  // a LossScaleOptimizer: what it wraps, and the scale's state
    hdf5::write_string(g.get(), "inner_optimizer", opt.inner_name);
    hdf5::write_scalar<double>(g.get(), "loss_scale", opt.loss_scale);
    hdf5::write_scalar<std::int64_t>(g.get(), "loss_scale_step_counter",
                                     opt.loss_scale_step_counter);
  }
}

//! Every variable and its first `slots` optimizer slots, each process its blocks.
template <class Model>
void write_state(hid_t root, Model& model, std::size_t slots, MPI_Comm comm) {
  auto dxpl = hdf5::collective_transfer();
  model.for_each_variable_with_slots([&](auto& v, auto& s) {
    const StoredAs stored = stored_as(v.dtype);  // a 16-bit variable and its slots: exact
    write_tensor(root, variable_dataset(v.path), v.value, dxpl.get(), comm, true, stored);
    for (std::size_t k = 0; k < slots; ++k) {
      write_tensor(root, slot_dataset(v.path, k), s.at(k), dxpl.get(), comm, true, stored);
    }
  });
}

//! What a load expects of the file, from the compiled model.
template <class Model>
Expected expected_of(Model& model, const OptimizerRecord& opt) {
  Expected want;
  want.dtype = dtype_name<typename Model::value_type>();
  want.optimizer = opt;
  model.for_each_variable([&](auto& v) {
    want.variables.push_back(v.path);
    want.entries.push_back({variable_dataset(v.path), "variable '" + v.path + "'", v.shape()});
    for (std::size_t k = 0; k < opt.slot_count; ++k) {
      want.entries.push_back({slot_dataset(v.path, k),
                              "optimizer slot " + std::to_string(k) + " of '" + v.path + "'",
                              v.shape()});
    }
  });
  return want;
}

//! Reads every variable's and slot's block into host buffers (collective); returns what copies
//! them into the model.
template <class Model>
std::vector<std::function<void()>> read_state(hid_t file, Model& model, std::size_t slots,
                                              ReadLog& log) {
  std::vector<std::function<void()>> commit;
  auto dxpl = hdf5::independent_transfer();  // each process its own block
  model.for_each_variable_with_slots([&](auto& v, auto& s) {
    commit.push_back(read_tensor(file, variable_dataset(v.path), "variable '" + v.path + "'",
                                 v.value, dxpl.get(), log));
    // a slot may be a copy (sharded or 16-bit state) that goes back into the state when f
    // returns: its values are in it by then
    for (std::size_t k = 0; k < slots; ++k) {
      read_tensor(file, slot_dataset(v.path, k),
                  "optimizer slot " + std::to_string(k) + " of '" + v.path + "'", s.at(k),
                  dxpl.get(), log)();
    }
  });
  return commit;
}

//! Broadcasts what process 0 found in the file.
inline void broadcast(LoadedCheckpoint& out) {
  std::uint64_t epoch = out.epoch, seed = out.seed;
  kdist::broadcast(epoch, 0, kdist::communicator());
  kdist::broadcast(seed, 0, kdist::communicator());
  kdist::broadcast(out.step, 0, kdist::communicator());
  kdist::broadcast(out.loss, 0, kdist::communicator());
  kdist::broadcast(out.loss_scale, 0, kdist::communicator());
  kdist::broadcast(out.loss_scale_step_counter, 0, kdist::communicator());
  out.epoch = static_cast<std::size_t>(epoch);
  out.seed = seed;
  broadcast_string(out.optimizer);
  broadcast_string(out.distribution);
  broadcast_string(out.mesh);
}

}  // namespace detail::checkpoint

//! Saves `model` (weights, optimizer slots, step counter, seed) and `info` to the HDF5 file
//! `path`, replacing it atomically. Collective: every process calls it with the same path; each
//! writes only its own block of each variable (blocks replicated over mesh axes once, by the
//! process at coordinate 0 along them), in collective MPI-IO; no process holds more than its
//! block. Device memory is copied to a host mirror first.
//!
//! The file is written as `<path>.tmp-<pid of process 0>`; after every process has closed it,
//! process 0 flushes it to storage and renames it to `<path>`. A save that dies midway leaves
//! `<path>` as it was (and the temporary file behind).
//!
//! Errors: kdist::ValueError if the model is not compiled; kdist::RuntimeError if the file cannot
//! be created, written, flushed or renamed (on every process alike when the file system fails for
//! all; docs/checkpoints.md).
template <class T>
void save_checkpoint(BasicSequential<T>& model, const std::string& path, CheckpointInfo info = {}) {
  namespace ck = detail::checkpoint;
  namespace h5 = detail::hdf5;
  ck::finish_background_writes();  // an AsyncCheckpointer's save in flight: HDF5 is ours after it
  detail::ProfilingRegion region("kdist::save_checkpoint");
  const ck::Metadata metadata = ck::start_save(model, path, info, "kdist::save_checkpoint");
  Kokkos::fence();  // the model's last step is complete before its blocks are read
  ck::write_atomically(path, "kdist::save_checkpoint", kdist::communicator(), [&](hid_t file) {
    ck::write_metadata(file, metadata);
    ck::write_state(file, model, metadata.optimizer.slot_count, kdist::communicator());
  });
}

//! Loads the checkpoint `path` into the compiled `model`: its weights, optimizer slots and step
//! counter, whatever mesh and layouts it was saved with. Collective: every process calls it with
//! the same path, and reads only the part of each dataset its block covers under the model's
//! current layouts; then copies it to device memory.
//!
//! The file is checked first, by process 0, and every process throws the same error when it is
//! wrong: kdist::ValueError for a missing file, a file that is not HDF5, is truncated or damaged,
//! is HDF5 but not a kdist checkpoint (no `format` attribute) or of another format version, holds
//! another dtype, other variables or shapes (another model), another optimizer or another number
//! of slots per variable; each message names the file, the variable and what was expected
//! (docs/errors.md); the model is then unchanged. Then each process reads its blocks (in place in
//! host memory, through a host buffer for device memory): kdist::ValueError when some block's data
//! fails its checksum (HDF5's Fletcher32 filter; the file is corrupt: restore it or load an earlier
//! checkpoint), kdist::RuntimeError for an I/O failure while reading; both leave the model partly
//! loaded, and both are agreed on by every process (whichever processes read the bad chunk).
//! Files without checksums (kdist's before issue 21) load unchecked.
//!
//! Returns what the file says (epoch, step, seed, ...). The seed is not restored: compile the model
//! with the saved one (`LoadedCheckpoint::seed`) for dropout masks and shuffles to continue as an
//! uninterrupted run would.
template <class T>
LoadedCheckpoint load_checkpoint(BasicSequential<T>& model, const std::string& path) {
  namespace ck = detail::checkpoint;
  namespace h5 = detail::hdf5;
  ck::finish_background_writes();  // an AsyncCheckpointer's save in flight: HDF5 is ours after it
  detail::ProfilingRegion region("kdist::load_checkpoint");
  ck::require_compiled(model, "kdist::load_checkpoint");
  ck::require_same_path(path, "kdist::load_checkpoint");
  const auto opt = ck::describe(model.optimizer());
  LoadedCheckpoint out;
  // Every call below has a deadline (io_watch.hpp): a process stopped midway ends the job.
  detail::io_watch::IoWatch watch("kdist::load_checkpoint", path, kdist::communicator());
  detail::io_watch::IoWatch::Scope watching(watch);
  std::string problem;
  if (kdist::process_id() == 0) {
    const auto checking = detail::io_watch::operation("checking the file (process 0)", false);
    problem = ck::check_file(path, ck::expected_of(model, opt), out);
  }
  mpi::agree<ValueError>(kdist::communicator(), problem.empty(), problem);
  ck::broadcast(out);

  // The file was checked: each process reads its blocks (in place on the host; device blocks are
  // copied from their host buffers once all were read).
  Kokkos::fence();
  std::vector<std::function<void()>> commit;
  {
    h5::QuietErrors quiet;
    h5::ParallelFile file = ck::open_on_every_process(path, "kdist::load_checkpoint");
    ck::ReadLog log;
    try {
      const auto reading = detail::io_watch::operation("reading '" + path + "'");
      commit = ck::read_state(file.get(), model, opt.slot_count, log);
    } catch (const RuntimeError& e) {
      throw RuntimeError("kdist::load_checkpoint: reading '" + path + "': " + e.what());
    }
    // a chunk that failed its checksum on some process: the same error on every process
    try {
      ck::reads_agree(log, "kdist::load_checkpoint", path,
                      "restore the file from a copy, or load an earlier checkpoint");
    } catch (const Error&) {
      (void)file.close();  // every process throws the same: it may close collectively
      throw;
    }
    const auto closing = detail::io_watch::operation("closing the file (H5Fclose)");
    h5::check(file.close(), "kdist::load_checkpoint: closing '" + path + "'");
  }
  for (auto& c : commit) c();
  detail::round_variables_to_their_dtypes(model.layers());  // values saved wider: as Keras assigns
  Kokkos::fence();
  model.set_iterations(out.step);
  if (auto* scaling = model.loss_scaling()) {
    scaling->set_scale_state(out.loss_scale, out.loss_scale_step_counter);
  }
  return out;
}

}  // namespace kdist
