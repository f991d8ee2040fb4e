#pragma once
//! \file io/detail/parallel_hdf5_io.hpp
//! The machinery that kdist's HDF5 files share (checkpoint.hpp, keras_weights.hpp): each process
//! writing or reading only its block of a distributed tensor (hyperslabs, collective MPI-IO;
//! blocks replicated over mesh axes written once), a file written under a temporary name and
//! renamed into place once complete, the checks process 0 makes before a load, and the optimizer
//! as these files record it.

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <mpi.h>
#include <Kokkos_Core.hpp>

#include <kdist/core/detail/python_repr.hpp>
#include <kdist/core/error.hpp>
#include <kdist/io/detail/hdf5.hpp>
#include <kdist/io/detail/io_watch.hpp>
#include <kdist/io/detail/sixteen_bit_datasets.hpp>
#include <kdist/nn/optimizer.hpp>
#include <kdist/parallel/collectives.hpp>
#include <kdist/parallel/detail/failure.hpp>
#include <kdist/parallel/mpi/agree.hpp>
#include <kdist/tensor/tensor.hpp>

namespace kdist::detail::checkpoint {

//! The optimizer as these files record it, read from what it declares (kdist::Optimizer): its
//! name, its slots (names, Keras' order) and its hyperparameters.
struct OptimizerRecord {
  std::string name;
  std::size_t slot_count = 0;
  std::vector<std::string> slot_names;
  //! Keras' order of the slots, as groups of slot indices (AnyOptimizer::keras_slot_groups).
  std::vector<std::vector<std::size_t>> keras_groups;
  std::vector<std::pair<std::string, double>> hyperparameters;
  double learning_rate = 0;
  //! A kdist::LossScaleOptimizer's: the inner optimizer's name ("" for any other optimizer) and
  //! the scale's state (Keras' dynamic_scale and step_counter).
  std::string inner_name;
  double loss_scale = 0;
  std::int64_t loss_scale_step_counter = 0;
  bool loss_scaled() const { return !inner_name.empty(); }
};
template <class T>
OptimizerRecord describe(const AnyOptimizer<T>& o) {
  OptimizerRecord r;
  r.name = o.name();
  r.slot_names = o.slots().names;
  r.slot_count = r.slot_names.size();
  r.keras_groups = o.keras_slot_groups();
  r.hyperparameters = o.hyperparameters();
  r.learning_rate = o.learning_rate();
  if (const auto* scaling = o.loss_scaling()) {
    r.inner_name = scaling->inner_optimizer().name();
    r.loss_scale = scaling->loss_scale();
    r.loss_scale_step_counter = scaling->step_counter();
  }
  return r;
}

template <class T>
constexpr const char* dtype_name() {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>,
                "kdist checkpoints hold float32 or float64 models");
  return std::is_same_v<T, float> ? "float32" : "float64";
}

//! `s` as process 0 has it, on every process.
inline void broadcast_string(std::string& s) {
  kdist::broadcast(s, 0, kdist::communicator());
}

//! Every process must name the same file (a rank in the path is a mistake MPI-IO would answer
//! with a hang or an error on some processes only): the same ValueError everywhere otherwise.
inline void require_same_path(const std::string& path, const char* who) {
  std::string zero = path;
  broadcast_string(zero);
  mpi::agree<ValueError>(kdist::communicator(), zero == path,
                         std::string(who) + ": the processes were given different paths ('" + zero +
                             "' on process 0, '" + path + "' on process " +
                             std::to_string(kdist::process_id()) +
                             "); give every process the same path");
}

template <class Model>
void require_compiled(const Model& model, const char* who) {
  if (model.output_shape().empty()) {  // compile builds the layers, which fixes the output shape
    throw ValueError(std::string(who) +
                     ": the model is not compiled; call model.compile(...) first (its distribution "
                     "decides which block of each variable this process holds)");
  }
}

//! Whether this process writes its block of `t`: blocks replicated along some mesh axes are
//! written once, by the process at coordinate 0 along each of them.
template <class Tensor>
bool writes_block(const Tensor& t) {
  const auto coords = t.device_mesh().coords_of(t.device());
  for (auto a : t.layout().replicated_mesh_axes()) {
    if (coords[a] != 0) return false;
  }
  std::size_t n = 1;
  for (auto e : t.local_extents()) n *= e;
  return n > 0;
}

//! This process's block of a dataset of shape `shape`: a hyperslab of the file space and a memory
//! space of its extents, or none in both when `take` is false (the process still joins the
//! collective transfer).
inline std::pair<hdf5::Dataspace, hdf5::Dataspace> block_selection(
    const std::vector<hsize_t>& shape, const std::vector<std::size_t>& lo,
    const std::vector<std::size_t>& ext, bool take) {
  auto file = hdf5::simple_space(shape);
  if (!take) {
    hdf5::check(H5Sselect_none(file.get()), "H5Sselect_none");
    const hsize_t one = 1;
    auto mem = hdf5::simple_space(std::span<const hsize_t>(&one, 1));
    hdf5::check(H5Sselect_none(mem.get()), "H5Sselect_none");
    return {std::move(file), std::move(mem)};
  }
  const std::vector<hsize_t> start(lo.begin(), lo.end()), count(ext.begin(), ext.end());
  hdf5::check(
      H5Sselect_hyperslab(file.get(), H5S_SELECT_SET, start.data(), nullptr, count.data(), nullptr),
      "H5Sselect_hyperslab");
  return {std::move(file), hdf5::simple_space(count)};
}

template <class Range>
std::vector<hsize_t> dims_of(const Range& shape) {
  return std::vector<hsize_t>(std::begin(shape), std::end(shape));
}

//! One process's block of a distributed tensor as a save writes it, on the host: the tensor's
//! global shape, the block's offsets and extents, the layout recorded with it, whether this
//! process writes it (writes_block) and, when it does, its values (row-major). What an
//! asynchronous save keeps of a tensor (async_checkpoint.hpp), so that its write needs neither the
//! tensor nor Kokkos.
template <class T>
struct HostBlock {
  std::vector<std::size_t> shape;
  std::vector<std::size_t> offsets;
  std::vector<std::size_t> extents;
  std::string layout;
  bool writes = false;
  const T* data = nullptr;  // extents' product values when `writes`
};

//! `t`'s block as HostBlock describes it, without its values.
template <class Tensor>
HostBlock<typename Tensor::value_type> describe_block(const Tensor& t) {
  HostBlock<typename Tensor::value_type> b;
  b.shape.assign(t.shape().begin(), t.shape().end());
  b.offsets.assign(t.offsets().begin(), t.offsets().end());
  b.extents.assign(t.local_extents().begin(), t.local_extents().end());
  b.layout = t.layout().axes_repr();
  b.writes = writes_block(t);
  return b;
}

//! Whether saves give every dataset a checksum (HDF5's Fletcher32 filter on chunked storage;
//! docs/checkpoints.md, "Checksums"). Always true in use: tests and benchmarks turn it off to
//! write files as kdist wrote them before checksums (contiguous, unfiltered), which loads accept.
inline bool write_checksums = true;

//! The most bytes one chunk of a checksummed dataset holds: a load reads and checks whole chunks,
//! so a process whose block covers part of a chunk reads all of it.
inline constexpr std::size_t max_chunk_bytes = std::size_t{1} << 20;

//! The chunk shape of a checksummed dataset of global shape `dims` whose processes hold blocks of
//! `extents` (this one's) and values of `value_bytes`: the largest block any process holds (so
//! that, on the mesh and layout of the save, a block is whole chunks and a chunk is written by one
//! process), halved along its leading dimensions while it holds more than max_chunk_bytes.
//! Collective over `comm` (an MPI_Allreduce over the processes' block extents).
inline std::vector<hsize_t> chunk_dims(const std::vector<std::size_t>& extents,
                                       const std::vector<hsize_t>& dims, std::size_t value_bytes,
                                       MPI_Comm comm) {
  const std::size_t rank = dims.size();
  std::vector<long long> mine(rank), most(rank);
  for (std::size_t d = 0; d < rank; ++d) mine[d] = static_cast<long long>(extents[d]);
  kdist::mpi::detail::check_mpi(
      MPI_Allreduce(mine.data(), most.data(), static_cast<int>(rank), MPI_LONG_LONG, MPI_MAX, comm),
      "kdist checkpoint: MPI_Allreduce of the block extents");
  std::vector<hsize_t> chunk(rank);
  std::size_t bytes = value_bytes;
  for (std::size_t d = 0; d < rank; ++d) {
    chunk[d] = std::max<hsize_t>(1, std::min<hsize_t>(static_cast<hsize_t>(most[d]), dims[d]));
    bytes *= chunk[d];
  }
  for (std::size_t d = 0; d < rank && bytes > max_chunk_bytes; ++d) {
    while (bytes > max_chunk_bytes && chunk[d] > 1) {
      bytes /= chunk[d];
      chunk[d] = (chunk[d] + 1) / 2;
      bytes *= chunk[d];
    }
  }
  return chunk;
}

//! Creates dataset `name` for `block`'s tensor (every process of `comm`, collectively) and writes
//! this process's block, or nothing if another process writes the same block. `annotate`: record
//! the global shape, dtype and layout as the dataset's attributes (kdist checkpoints; Keras files
//! have none). `stored`: the values rounded to 16 bits as Keras stores them
//! (sixteen_bit_datasets.hpp). Touches no Kokkos view: it runs on an asynchronous save's thread too.
template <class T>
void write_block(hid_t file, const std::string& name, const HostBlock<T>& block, hid_t dxpl,
                 MPI_Comm comm, bool annotate = true, StoredAs stored = StoredAs::native) {
  const auto watched = io_watch::operation("writing dataset '/" + name + "'");
  const auto dims = dims_of(block.shape);
  hdf5::PropertyList lcpl(hdf5::check(H5Pcreate(H5P_LINK_CREATE), "H5Pcreate"));
  hdf5::check(H5Pset_create_intermediate_group(lcpl.get(), 1), "H5Pset_create_intermediate_group");
  hdf5::PropertyList dcpl(hdf5::check(H5Pcreate(H5P_DATASET_CREATE), "H5Pcreate"));
  hdf5::check(H5Pset_fill_time(dcpl.get(), H5D_FILL_TIME_NEVER), "H5Pset_fill_time");
  hdf5::check(H5Pset_alloc_time(dcpl.get(), H5D_ALLOC_TIME_EARLY), "H5Pset_alloc_time");
  std::size_t elements = 1;
  for (auto e : dims) elements *= e;
  // A checksum per chunk (Fletcher32), checked by HDF5 on every read of the chunk. A dataset of
  // no elements holds no data to check (and cannot be chunked); the write below is collective,
  // as HDF5 requires for filtered datasets.
  if (write_checksums && !dims.empty() && elements > 0) {
    const auto chunk =
        chunk_dims(block.extents, dims, stored == StoredAs::native ? sizeof(T) : 2, comm);
    hdf5::check(H5Pset_chunk(dcpl.get(), static_cast<int>(chunk.size()), chunk.data()),
                "H5Pset_chunk");
    hdf5::check(H5Pset_fletcher32(dcpl.get()), "H5Pset_fletcher32");
  }
  const bool sixteen = stored != StoredAs::native;
  const hdf5::Datatype words = sixteen ? sixteen_bit_type(stored) : hdf5::Datatype();
  hdf5::ParallelDataset ds;
  {
    auto space = hdf5::simple_space(dims);
    ds = hdf5::ParallelDataset(hdf5::check(
        H5Dcreate2(file, name.c_str(), sixteen ? words.get() : hdf5::file_float_type<T>(),
                   space.get(), lcpl.get(), dcpl.get(), H5P_DEFAULT),
        "H5Dcreate2 '" + name + "'"));
  }
  if (stored == StoredAs::bfloat16) write_variable_string(ds.get(), "dtype", "bfloat16");
  if (annotate) {
    hdf5::write_array(ds.get(), "shape",
                      std::vector<std::uint64_t>(block.shape.begin(), block.shape.end()));
    // (a bfloat16 dataset's `dtype` is Keras' attribute above)
    if (stored != StoredAs::bfloat16) {
      hdf5::write_string(ds.get(), "dtype", sixteen ? dtype_of(stored) : dtype_name<T>());
    }
    hdf5::write_string(ds.get(), "layout", block.layout);
  }
  auto [fspace, mspace] = block_selection(dims, block.offsets, block.extents, block.writes);
  const T dummy{};
  const void* data = block.writes ? static_cast<const void*>(block.data) : &dummy;
  std::vector<std::uint16_t> rounded;
  if (sixteen && block.writes) {
    std::size_t n = 1;
    for (auto e : block.extents) n *= e;
    rounded = to_sixteen_bit(std::span<const T>(block.data, n), stored);
    data = rounded.data();
  }
  hdf5::check(H5Dwrite(ds.get(), sixteen ? words.get() : hdf5::native_type<T>(), mspace.get(),
                       fspace.get(), dxpl, data),
              "H5Dwrite '" + name + "'");
  hdf5::check(ds.close(), "H5Dclose '" + name + "'");
}

//! write_block of tensor `t`'s block (device memory is copied to a host mirror first; only the
//! block's writer copies it).
template <class Tensor>
void write_tensor(hid_t file, const std::string& name, const Tensor& t, hid_t dxpl, MPI_Comm comm,
                  bool annotate = true, StoredAs stored = StoredAs::native) {
  auto block = describe_block(t);
  // the block in host memory (on a CPU build, the block itself)
  decltype(Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), t.local())) host;
  if (block.writes) {
    host = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), t.local());
    block.data = host.data();
  }
  write_block(file, name, block, dxpl, comm, annotate, stored);
}

//! The reads of a load on this process: each read (the same sequence on every process) fails or
//! not here; the first failure is kept, and reads_agree makes it the same error on every process.
//! A failed read does not stop the others (the datasets are opened collectively: a process that
//! stopped would leave the others waiting).
struct ReadLog {
  std::size_t count = 0;                                         //!< reads so far
  std::size_t failed = std::numeric_limits<std::size_t>::max();  //!< index of the first failure
  std::string dataset;    //!< its dataset ("variables/d1/kernel")
  std::string what;       //!< what it holds ("variable 'd1/kernel'")
  std::string why;        //!< HDF5's message
  bool checksum = false;  //!< it failed its checksum (the data is corrupt)

  //! Records read number `count` (then counts it): `ok`, or failed with HDF5's error stack now.
  void record(bool ok, const std::string& name, const std::string& holds, bool bad_checksum,
              const std::string& hdf5_text) {
    if (!ok && failed == std::numeric_limits<std::size_t>::max()) {
      failed = count;
      dataset = name;
      what = holds;
      why = hdf5_text;
      checksum = bad_checksum;
    }
    ++count;
  }
};

//! Makes the first failed read of any process (by read index; the lowest process among those
//! that failed it) the same exception on every process: kdist::ValueError when the data failed
//! its checksum (the file is corrupt), kdist::RuntimeError for another I/O failure. `who`
//! begins the message ("kdist::load_checkpoint"); `restore` says what to load instead.
//! Collective: one MPI_Allreduce when every read succeeded.
inline void reads_agree(const ReadLog& log, const std::string& who, const std::string& path,
                        const std::string& restore) {
  // (signed: this MPICH's MPI_MIN of MPI_UNSIGNED_LONG_LONG compares them as signed)
  constexpr long long none = std::numeric_limits<long long>::max();
  long long mine = log.failed == std::numeric_limits<std::size_t>::max()
                       ? none
                       : static_cast<long long>(log.failed),
            first = 0;
  kdist::mpi::detail::check_mpi(
      MPI_Allreduce(&mine, &first, 1, MPI_LONG_LONG, MPI_MIN, kdist::communicator()),
      "kdist load: MPI_Allreduce of the read failures");
  if (first == none) return;
  const bool here = mine == first;
  std::string message;
  if (here && log.checksum) {
    message = who + ": '" + path + "' is corrupt: the data of " + log.what + " (dataset '/" +
              log.dataset + "') does not match its checksum (HDF5: " + log.why +
              "); the model is partly loaded: " + restore;
  } else if (here) {
    message = who + ": reading '" + path + "': " + log.what + " (dataset '/" + log.dataset +
              "') cannot be read: HDF5: " + log.why + "; the model is partly loaded (load again)";
  }
  const auto d = kdist::mpi::detail::agree_on(kdist::communicator(), !here, message,
                                              here && log.checksum ? 1 : 0);
  if (d->kind == 1) throw ValueError(d->message);
  throw RuntimeError(d->message);
}

//! Whether HDF5's current error stack says that a checksum did not match (Fletcher32: "data
//! error detected by fletcher32 checksum").
inline bool checksum_failed() {
  bool found = false;
  H5Ewalk2(
      H5E_DEFAULT, H5E_WALK_UPWARD,
      [](unsigned, const H5E_error2_t* e, void* out) -> herr_t {
        if (e->desc != nullptr && std::strstr(e->desc, "checksum") != nullptr) {
          *static_cast<bool*>(out) = true;
        }
        return 0;
      },
      &found);
  return found;
}

//! Reads this process's block of tensor `t` (its block under its current layout) from dataset
//! `name` (`what` says what it holds, for messages). A block in host memory is read in place (the
//! caller has checked the file: what is left to fail is I/O and checksums); a block in device
//! memory is read into a host buffer, and the returned function copies it to the device. A failed
//! read (a chunk that fails its Fletcher32 checksum, an I/O error) is recorded in `log`, not
//! thrown: call reads_agree once every read is done.
template <class Tensor>
std::function<void()> read_tensor(hid_t file, const std::string& name, const std::string& what,
                                  const Tensor& t, hid_t dxpl, ReadLog& log) {
  using T = typename Tensor::value_type;
  using View = std::decay_t<decltype(t.local())>;
  // In place on the host: a fresh buffer would cost its page faults and a copy, as much as the
  // read itself (docs/benchmarks.md).
  constexpr bool in_place =
      Kokkos::SpaceAccessibility<Kokkos::HostSpace, typename View::memory_space>::accessible;
  typename View::HostMirror staging;
  if constexpr (in_place) {
    staging = t.local();
  } else {
    staging = typename View::HostMirror(
        Kokkos::view_alloc(Kokkos::WithoutInitializing, "kdist::read_staging"), t.local().layout());
  }
  const auto watched = io_watch::operation("reading dataset '/" + name + "'");
  hdf5::ParallelDataset ds(
      hdf5::check(H5Dopen2(file, name.c_str(), H5P_DEFAULT), "H5Dopen2 '" + name + "'"));
  std::size_t n = 1;
  for (auto e : t.local_extents()) n *= e;
  auto [fspace, mspace] = block_selection(
      dims_of(t.shape()), std::vector<std::size_t>(t.offsets().begin(), t.offsets().end()),
      std::vector<std::size_t>(t.local_extents().begin(), t.local_extents().end()), n > 0);
  // 16-bit values (Keras' "bfloat16" and "float16" policies) are read as they are stored into
  // the start of the block, then widened in place.
  const hdf5::Datatype file_type(H5Dget_type(ds.get()));
  const StoredAs stored =
      file_type.valid() ? stored_as(ds.get(), file_type.get()) : StoredAs::native;
  const hdf5::Datatype words =
      stored != StoredAs::native ? sixteen_bit_type(stored) : hdf5::Datatype();
  T dummy{};
  const bool ok =
      H5Dread(ds.get(), stored != StoredAs::native ? words.get() : hdf5::native_type<T>(),
              mspace.get(), fspace.get(), dxpl,
              n > 0 ? static_cast<void*>(staging.data()) : &dummy) >= 0;
  if (ok && n > 0 && stored != StoredAs::native) widen_in_place(staging.data(), n, stored);
  log.record(ok, name, what, !ok && checksum_failed(), ok ? std::string() : hdf5::error_text());
  hdf5::check(ds.close(), "H5Dclose '" + name + "'");
  if constexpr (in_place) {
    return [] {};
  } else {
    auto target = t.local();
    return [target, staging]() { Kokkos::deep_copy(target, staging); };
  }
}

//! What kind of file a load expects, for its messages.
struct FileKind {
  std::string noun;      //!< "a checkpoint": "a checkpoint is written by ..."
  std::string file;      //!< "a checkpoint file": "... is a directory, not a checkpoint file"
  std::string writer;    //!< what writes one: "kdist::save_checkpoint"
  std::string not_hdf5;  //!< why a file without the HDF5 signature is not one
};

//! Opens `path` on this process alone for the checks of a load (process 0). Returns "" with
//! `file` open, or the error's message (`who` begins it): a missing file, a directory, a file
//! that is not HDF5, a damaged or truncated one.
inline std::string open_to_check(const std::string& path, const std::string& who,
                                 const FileKind& kind, hdf5::File& file) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) {
      return who + ": no such file (" + kind.noun + " is written by " + kind.writer +
             "; every process must see the same path)";
    }
    return who + ": cannot be read: " + std::strerror(errno);
  }
  if (S_ISDIR(st.st_mode)) return who + " is a directory, not " + kind.file;
  if (hdf5::is_hdf5(path.c_str()) <= 0) return who + " is not an HDF5 file, " + kind.not_hdf5;
  const auto fapl = hdf5::local_read_access();
  file = hdf5::File(H5Fopen(path.c_str(), H5F_ACC_RDONLY, fapl.get()));
  if (!file.valid()) {  // (before any other HDF5 call, which would clear the error stack)
    return who + " is a damaged or truncated HDF5 file and cannot be opened (HDF5: " +
           hdf5::error_text() + ")";
  }
  return {};
}

//! What check_float_dataset found wrong: nothing (empty text), a damaged dataset, or a dataset of
//! another shape (the file is of another model).
struct DatasetProblem {
  std::string text;
  bool other_shape = false;
  bool empty() const { return text.empty(); }
};

//! Checks dataset `name` of `root` on this process alone: present, floating point (of `width`
//! bytes, any width when 0), of shape `shape`. `what` says what it holds ("variable 'd1/kernel'"),
//! `file_noun` what the file is ("checkpoint").
inline DatasetProblem check_float_dataset(hid_t root, const std::string& name,
                                          const std::string& what,
                                          const std::vector<std::size_t>& shape, std::size_t width,
                                          const std::string& file_noun) {
  const std::string where = "dataset '/" + name + "' (" + what + ")";
  if (!hdf5::path_exists(root, name)) return {where + " is missing"};
  hdf5::Dataset ds(H5Dopen2(root, name.c_str(), H5P_DEFAULT));
  if (!ds.valid()) return {where + " is not a dataset"};
  hdf5::Datatype type(H5Dget_type(ds.get()));
  hdf5::Dataspace space(H5Dget_space(ds.get()));
  // any width: also Keras' 16-bit storage (IEEE half, or bfloat16 as 2-byte opaque values)
  const StoredAs stored = type.valid() ? stored_as(ds.get(), type.get()) : StoredAs::native;
  const bool sixteen = width == 0 && ((stored == StoredAs::float16 && is_ieee_half(type.get())) ||
                                      stored == StoredAs::bfloat16);
  if (!sixteen &&
      (!type.valid() || H5Tget_class(type.get()) != H5T_FLOAT || H5Tget_size(type.get()) < 4 ||
       (width != 0 && H5Tget_size(type.get()) != width))) {
    return {where + " does not hold " +
            (width == 0   ? std::string("floating-point")
             : width == 4 ? "float32"
                          : "float64") +
            " values"};
  }
  const int rank = space.valid() ? H5Sget_simple_extent_ndims(space.get()) : -1;
  std::vector<hsize_t> dims(rank > 0 ? static_cast<std::size_t>(rank) : 0);
  if (rank < 0 || H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr) < 0) {
    return {where + " has no simple shape"};
  }
  const std::vector<std::size_t> got(dims.begin(), dims.end());
  if (got != shape) {
    return {what + " has shape " + detail::shape_repr(got) + " in the " + file_noun + " but " +
                detail::shape_repr(shape) + " in the model",
            true};
  }
  return {};
}

//! Opens `path` for reading on every process (MPI-IO); the same kdist::RuntimeError everywhere if
//! any process cannot (`who` begins it). Call it under hdf5::QuietErrors.
inline hdf5::ParallelFile open_on_every_process(const std::string& path, const std::string& who) {
  const auto watched = io_watch::operation("opening (H5Fopen, MPI-IO) on every process");
  const auto fapl = hdf5::mpio_access(kdist::communicator());
  hdf5::ParallelFile file(H5Fopen(path.c_str(), H5F_ACC_RDONLY, fapl.get()));
  const std::string why = file.valid() ? std::string() : hdf5::error_text();
  mpi::agree<RuntimeError>(kdist::communicator(), file.valid(),
                           who + ": '" + path + "' cannot be opened by every process (is it on " +
                               "a file system they all see?): HDF5: " + why);
  return file;
}

//! This process' rank in `comm`.
inline int rank_in(MPI_Comm comm) {
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  return rank;
}

//! Process 0 fsyncs `tmp`, renames it to `path` (an atomic replace) and fsyncs the directory.
//! Returns "" or what failed.
inline std::string publish(const std::string& tmp, const std::string& path) {
  const int fd = ::open(tmp.c_str(), O_RDONLY);
  if (fd < 0) return "cannot open '" + tmp + "' to flush it: " + std::strerror(errno);
  const int synced = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  if (synced != 0) return "fsync of '" + tmp + "' failed: " + std::strerror(err);
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    return "cannot rename '" + tmp + "' to '" + path + "': " + std::strerror(errno);
  }
  const auto slash = path.find_last_of('/');
  const std::string dir = slash == std::string::npos ? "."
                          : slash == 0               ? "/"
                                                     : path.substr(0, slash);
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (dfd >= 0) {  // makes the rename durable; a file system that cannot is no error
    (void)::fsync(dfd);
    ::close(dfd);
  }
  return {};
}

//! Creates `<path>.tmp-<pid of process 0>` collectively over `comm` (MPI-IO), lets `body(file)`
//! write it, flushes it (MPI_File_sync on every process), closes it, and has process 0 flush and
//! rename it to `path`: a write that dies midway leaves `path` as it was. Every call has a deadline
//! (the I/O watchdog, io_watch.hpp; `step` says when it runs, empty: this thread's training step):
//! a process that stops midway ends the job, naming it. Errors (kdist::RuntimeError, on every
//! process alike): the file cannot be created, written, flushed or renamed; `who` begins each
//! message. The caller has fenced what `body` reads (Kokkos::fence()): an asynchronous save runs
//! this on its own thread, from host copies, and makes no Kokkos call here.
template <class Body>
void write_atomically(const std::string& path, const std::string& who, MPI_Comm comm, Body&& body,
                      const std::string& step = "") {
  std::int64_t pid = static_cast<std::int64_t>(::getpid());
  kdist::broadcast(pid, 0, comm);
  const std::string tmp = path + ".tmp-" + std::to_string(pid);
  io_watch::IoWatch watch(who, path, comm,
                          "'" + path + "' is as it was: the save writes '" + tmp +
                              "' and renames it only once every process has written its part",
                          step);
  io_watch::IoWatch::Scope watching(watch);
  {
    hdf5::QuietErrors quiet;
    const auto fapl = hdf5::mpio_access(comm);
    if (write_checksums) {
      // HDF5 1.8's file format: object headers (and the attributes in them) carry a checksum
      // that HDF5 checks when it reads them; h5py and Keras read it.
      hdf5::check(H5Pset_libver_bounds(fapl.get(), H5F_LIBVER_V18, H5F_LIBVER_V18),
                  "H5Pset_libver_bounds");
    }
    hdf5::ParallelFile file;
    {
      const auto watched = io_watch::operation("creating '" + tmp + "' (H5Fcreate, MPI-IO)");
      file = hdf5::ParallelFile(H5Fcreate(tmp.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl.get()));
    }
    const std::string why = file.valid() ? std::string() : hdf5::error_text();
    mpi::agree<RuntimeError>(
        comm, file.valid(),
        who + ": cannot create '" + tmp + "' (the temporary file of '" + path + "'): HDF5: " + why);
    try {
      const auto writing = io_watch::operation("writing '" + tmp + "'");  // its datasets nest
      body(file.get());
      const auto flushing = io_watch::operation("flushing '" + tmp + "' (H5Fflush)");
      hdf5::check(H5Fflush(file.get(), H5F_SCOPE_GLOBAL), "H5Fflush");
    } catch (const RuntimeError& e) {
      throw RuntimeError(who + ": writing '" + tmp + "': " + e.what());
    }
    const auto watched = io_watch::operation("closing '" + tmp + "' (H5Fclose)");
    hdf5::check(file.close(), who + ": closing '" + tmp + "'");
  }
  // every process has closed the file (an all-reduce: none goes on before all have come here)
  mpi::agree<RuntimeError>(comm, true, "");
  std::string failed;
  if (rank_in(comm) == 0) {
    const auto watched =
        io_watch::operation("publishing it (fsync and rename of '" + tmp + "')", false);
    failed = publish(tmp, path);
  }
  mpi::agree<RuntimeError>(comm, failed.empty(), who + ": '" + path + "': " + failed);
}

}  // namespace kdist::detail::checkpoint
