#pragma once
//! \file io/detail/hdf5.hpp
//! What kdist's checkpoints (kdist/io/checkpoint.hpp) need of the parallel HDF5 C library: RAII for
//! every `hid_t`, HDF5's error stack as the text of a kdist exception (never printed to stderr),
//! scalar, string and array attributes, and file access property lists for MPI-IO.
//!
//! Collective HDF5 objects (files and datasets opened with the MPI-IO driver) are closed by their
//! destructor on the normal path only: while an exception unwinds the stack, this process may be
//! the only one that failed, and a collective close would then wait forever for the others. The
//! handle is left open instead; kdist::run then ends the job (docs/reliability.md), or, when
//! every process failed alike, HDF5 closes it at MPI_Finalize on every process together.

#include <hdf5.h>
#include <mpi.h>

#if !defined(H5_HAVE_PARALLEL)
#error \
    "kdist/io/checkpoint.hpp needs the parallel (MPI) build of HDF5 (Debian: libhdf5-mpich-dev, headers in /usr/include/hdf5/mpich); this hdf5.h is a serial build. Link kdist::kdist, whose CMake finds the parallel one"
#endif

#include <algorithm>
#include <cstdint>
#include <exception>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include <kdist/core/error.hpp>

namespace kdist::detail::hdf5 {

//! An HDF5 identifier closed by `Close` when the handle dies. `Collective`: closing it is a
//! collective operation (see the file comment): skipped while an exception unwinds.
template <herr_t (*Close)(hid_t), bool Collective = false>
class Handle {
 public:
  Handle() = default;
  explicit Handle(hid_t id) : id_(id) {}
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  Handle(Handle&& o) noexcept : id_(std::exchange(o.id_, H5I_INVALID_HID)) {}
  Handle& operator=(Handle&& o) noexcept {
    if (this != &o) {
      reset();
      id_ = std::exchange(o.id_, H5I_INVALID_HID);
    }
    return *this;
  }
  ~Handle() {
    if (Collective && std::uncaught_exceptions() > exceptions_) return;  // see the file comment
    reset();
  }

  hid_t get() const { return id_; }
  bool valid() const { return id_ >= 0; }
  //! Closes now; returns HDF5's status (negative on failure).
  herr_t close() {
    if (!valid()) return 0;
    return Close(std::exchange(id_, H5I_INVALID_HID));
  }

 private:
  void reset() noexcept {
    if (valid()) (void)Close(std::exchange(id_, H5I_INVALID_HID));
  }
  hid_t id_ = H5I_INVALID_HID;
  int exceptions_ = std::uncaught_exceptions();
};

using File = Handle<H5Fclose>;                //!< a file opened by one process (sec2)
using ParallelFile = Handle<H5Fclose, true>;  //!< a file opened by every process (MPI-IO)
using Group = Handle<H5Gclose>;
using Dataset = Handle<H5Dclose>;
using ParallelDataset = Handle<H5Dclose, true>;  //!< a dataset of a ParallelFile
using Dataspace = Handle<H5Sclose>;
using Datatype = Handle<H5Tclose>;
using Attribute = Handle<H5Aclose>;
using PropertyList = Handle<H5Pclose>;

//! While alive, HDF5 prints nothing (its errors become exception messages instead).
class QuietErrors {
 public:
  QuietErrors() {
    H5Eget_auto2(H5E_DEFAULT, &func_, &data_);
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  }
  QuietErrors(const QuietErrors&) = delete;
  QuietErrors& operator=(const QuietErrors&) = delete;
  ~QuietErrors() { H5Eset_auto2(H5E_DEFAULT, func_, data_); }

 private:
  H5E_auto2_t func_ = nullptr;
  void* data_ = nullptr;
};

//! HDF5's current error stack in one line, the innermost cause first ("truncated file: eof =
//! 1024, ... (unable to open file)"); empty when the stack is empty.
inline std::string error_text() {
  std::vector<std::string> lines;
  H5Ewalk2(
      H5E_DEFAULT, H5E_WALK_UPWARD,
      [](unsigned, const H5E_error2_t* e, void* out) -> herr_t {
        auto& v = *static_cast<std::vector<std::string>*>(out);
        if (e->desc != nullptr && *e->desc != '\0') v.emplace_back(e->desc);
        return 0;
      },
      &lines);
  if (lines.empty()) return {};
  std::string out = lines.front();
  if (lines.size() > 1 && lines.back() != lines.front()) out += " (" + lines.back() + ")";
  std::replace(out.begin(), out.end(), '\n', ' ');  // MPI's error strings span lines
  return out;
}

//! Throws RuntimeError("<what>: <HDF5's message>") when `status` is negative (an HDF5 failure).
template <class Status>
Status check(Status status, const std::string& what) {
  if (status < 0) {
    const std::string why = error_text();
    throw RuntimeError(what + (why.empty() ? std::string() : ": HDF5: " + why));
  }
  return status;
}

// ---- file access --------------------------------------------------------------------------------

//! File access for every process of `comm` at once: MPI-IO, metadata read once and broadcast,
//! written collectively.
inline PropertyList mpio_access(MPI_Comm comm) {
  PropertyList fapl(check(H5Pcreate(H5P_FILE_ACCESS), "H5Pcreate"));
  check(H5Pset_fapl_mpio(fapl.get(), comm, MPI_INFO_NULL), "H5Pset_fapl_mpio");
  check(H5Pset_all_coll_metadata_ops(fapl.get(), true), "H5Pset_all_coll_metadata_ops");
  check(H5Pset_coll_metadata_write(fapl.get(), true), "H5Pset_coll_metadata_write");
  return fapl;
}

//! File access for one process reading alone (POSIX): without HDF5's file locks, which some
//! parallel and network file systems refuse, and which a read-only check does not need.
inline PropertyList local_read_access() {
  PropertyList fapl(check(H5Pcreate(H5P_FILE_ACCESS), "H5Pcreate"));
#if H5_VERSION_GE(1, 10, 7)
  check(H5Pset_file_locking(fapl.get(), false, true), "H5Pset_file_locking");
#endif
  return fapl;
}

//! Whether `path` starts with HDF5's signature (> 0), does not (0), or cannot be read (< 0).
inline htri_t is_hdf5(const char* path) {
#if H5_VERSION_GE(1, 12, 0)
  return H5Fis_accessible(path, H5P_DEFAULT);
#else
  return H5Fis_hdf5(path);
#endif
}

//! Raw data transfer in collective MPI-IO (every process joins each H5Dread / H5Dwrite; a process
//! with nothing to move selects none).
inline PropertyList collective_transfer() {
  PropertyList dxpl(check(H5Pcreate(H5P_DATASET_XFER), "H5Pcreate"));
  check(H5Pset_dxpl_mpio(dxpl.get(), H5FD_MPIO_COLLECTIVE), "H5Pset_dxpl_mpio");
  return dxpl;
}

//! Transfers in which each process reads or writes alone (MPI-IO independent I/O): what loads use,
//! each process reading only its own block (no process waits for another; measured 2.2x faster
//! than collective I/O at 2 processes, docs/benchmarks.md).
inline PropertyList independent_transfer() {
  PropertyList dxpl(check(H5Pcreate(H5P_DATASET_XFER), "H5Pcreate"));
  check(H5Pset_dxpl_mpio(dxpl.get(), H5FD_MPIO_INDEPENDENT), "H5Pset_dxpl_mpio");
  return dxpl;
}

//! Whether `name` (a path of '/'-separated links, relative to `loc`) exists, every link on the way
//! included (H5Lexists alone fails on a missing intermediate group).
inline bool path_exists(hid_t loc, std::string_view name) {
  std::size_t pos = 0;
  while (pos <= name.size()) {
    const std::size_t next = std::min(name.find('/', pos), name.size());
    const std::string prefix(name.substr(0, next));
    if (H5Lexists(loc, prefix.c_str(), H5P_DEFAULT) <= 0) return false;
    if (next == name.size()) return true;
    pos = next + 1;
  }
  return true;
}

// ---- attributes ---------------------------------------------------------------------------------

template <class T>
hid_t native_type();
template <>
inline hid_t native_type<std::int32_t>() {
  return H5T_NATIVE_INT32;
}
template <>
inline hid_t native_type<std::int64_t>() {
  return H5T_NATIVE_INT64;
}
template <>
inline hid_t native_type<std::uint64_t>() {
  return H5T_NATIVE_UINT64;
}
template <>
inline hid_t native_type<double>() {
  return H5T_NATIVE_DOUBLE;
}
template <>
inline hid_t native_type<float>() {
  return H5T_NATIVE_FLOAT;
}

//! The little-endian IEEE type a float or double dataset is stored as.
template <class T>
hid_t file_float_type() {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>,
                "kdist checkpoints store float or double values");
  return std::is_same_v<T, float> ? H5T_IEEE_F32LE : H5T_IEEE_F64LE;
}

inline Dataspace simple_space(std::span<const hsize_t> dims) {
  return Dataspace(check(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr),
                         "H5Screate_simple"));
}

//! Writes attribute `name` of `obj`: a scalar of type `type` (no `count`), or `*count` values
//! (an empty array is a null dataspace).
inline void write_attribute(hid_t obj, const char* name, hid_t type, std::optional<hsize_t> count,
                            const void* data) {
  Dataspace space(!count        ? check(H5Screate(H5S_SCALAR), "H5Screate")
                  : *count == 0 ? check(H5Screate(H5S_NULL), "H5Screate")
                                : check(H5Screate_simple(1, &*count, nullptr), "H5Screate_simple"));
  Attribute a(check(H5Acreate2(obj, name, type, space.get(), H5P_DEFAULT, H5P_DEFAULT),
                    std::string("H5Acreate2 '") + name + "'"));
  check(H5Awrite(a.get(), type, data), std::string("H5Awrite '") + name + "'");
}

template <class T>
void write_scalar(hid_t obj, const char* name, T value) {
  write_attribute(obj, name, native_type<T>(), std::nullopt, &value);
}
template <class T>
void write_array(hid_t obj, const char* name, const std::vector<T>& values) {
  const T dummy{};
  write_attribute(obj, name, native_type<T>(), values.size(),
                  values.empty() ? &dummy : values.data());
}

//! A fixed-length string type of `size` bytes (null-padded, at least 1).
inline Datatype string_type(std::size_t size) {
  Datatype t(check(H5Tcopy(H5T_C_S1), "H5Tcopy"));
  check(H5Tset_size(t.get(), size == 0 ? 1 : size), "H5Tset_size");
  check(H5Tset_strpad(t.get(), H5T_STR_NULLPAD), "H5Tset_strpad");
  return t;
}

inline void write_string(hid_t obj, const char* name, const std::string& value) {
  auto type = string_type(value.size());
  const std::string padded = value.empty() ? std::string(1, '\0') : value;
  write_attribute(obj, name, type.get(), std::nullopt, padded.data());
}
//! A 1-D array of fixed-length strings (each padded to the longest).
inline void write_strings(hid_t obj, const char* name, const std::vector<std::string>& values) {
  std::size_t width = 1;
  for (const auto& v : values) width = std::max(width, v.size());
  std::string buf(width * values.size(), '\0');
  for (std::size_t i = 0; i < values.size(); ++i) values[i].copy(buf.data() + i * width, width);
  auto type = string_type(width);
  const char dummy = '\0';
  write_attribute(obj, name, type.get(), values.size(), values.empty() ? &dummy : buf.data());
}

//! Reading, for the checks of a load: each returns false when the attribute is missing or of
//! another kind (a message is made by the caller, who knows what was expected).
inline bool has_attribute(hid_t obj, const char* name) {
  return H5Aexists(obj, name) > 0;
}

//! The attribute's element count (1 for a scalar) and type class, or false.
inline bool attribute_shape(hid_t obj, const char* name, hssize_t& count, H5T_class_t& cls,
                            std::size_t& size, bool& variable_string) {
  if (!has_attribute(obj, name)) return false;
  Attribute a(H5Aopen(obj, name, H5P_DEFAULT));
  if (!a.valid()) return false;
  Dataspace s(H5Aget_space(a.get()));
  Datatype t(H5Aget_type(a.get()));
  if (!s.valid() || !t.valid()) return false;
  count = H5Sget_simple_extent_npoints(s.get());
  cls = H5Tget_class(t.get());
  size = H5Tget_size(t.get());
  variable_string = cls == H5T_STRING && H5Tis_variable_str(t.get()) > 0;
  return count >= 0;
}

template <class T>
bool read_numbers(hid_t obj, const char* name, std::vector<T>& out) {
  hssize_t n = 0;
  H5T_class_t cls = H5T_NO_CLASS;
  std::size_t size = 0;
  bool vlen = false;
  if (!attribute_shape(obj, name, n, cls, size, vlen)) return false;
  if (cls != H5T_INTEGER && cls != H5T_FLOAT) return false;
  Attribute a(H5Aopen(obj, name, H5P_DEFAULT));
  out.assign(static_cast<std::size_t>(n), T{});
  T dummy{};
  return H5Aread(a.get(), native_type<T>(), n ? static_cast<void*>(out.data()) : &dummy) >= 0;
}
template <class T>
bool read_scalar(hid_t obj, const char* name, T& out) {
  std::vector<T> v;
  if (!read_numbers(obj, name, v) || v.size() != 1) return false;
  out = v[0];
  return true;
}

//! Strings of a scalar or 1-D string attribute, fixed-length or variable-length.
inline bool read_strings(hid_t obj, const char* name, std::vector<std::string>& out) {
  hssize_t n = 0;
  H5T_class_t cls = H5T_NO_CLASS;
  std::size_t size = 0;
  bool vlen = false;
  if (!attribute_shape(obj, name, n, cls, size, vlen) || cls != H5T_STRING) return false;
  Attribute a(H5Aopen(obj, name, H5P_DEFAULT));
  const auto count = static_cast<std::size_t>(n);
  out.clear();
  // The memory type takes the file's character set: HDF5 1.10 has no conversion between ASCII
  // and UTF-8 strings (h5py, so Keras, writes UTF-8).
  const Datatype stored(H5Aget_type(a.get()));
  const H5T_cset_t cset = stored.valid() ? H5Tget_cset(stored.get()) : H5T_CSET_ASCII;
  if (vlen) {
    Datatype mem(check(H5Tcopy(H5T_C_S1), "H5Tcopy"));
    H5Tset_size(mem.get(), H5T_VARIABLE);
    H5Tset_cset(mem.get(), cset == H5T_CSET_ERROR ? H5T_CSET_ASCII : cset);
    std::vector<char*> ptrs(count, nullptr);
    if (count && H5Aread(a.get(), mem.get(), ptrs.data()) < 0) return false;
    for (char* p : ptrs) {
      out.emplace_back(p ? p : "");
      H5free_memory(p);
    }
    return true;
  }
  Datatype mem = string_type(size);
  H5Tset_cset(mem.get(), cset == H5T_CSET_ERROR ? H5T_CSET_ASCII : cset);
  std::string buf(size * count, '\0');
  if (count && H5Aread(a.get(), mem.get(), buf.data()) < 0) return false;
  for (std::size_t i = 0; i < count; ++i) {
    std::string s = buf.substr(i * size, size);
    s.resize(std::min(s.size(), s.find('\0')));
    out.push_back(std::move(s));
  }
  return true;
}
inline bool read_string(hid_t obj, const char* name, std::string& out) {
  std::vector<std::string> v;
  if (!read_strings(obj, name, v) || v.size() != 1) return false;
  out = std::move(v[0]);
  return true;
}

}  // namespace kdist::detail::hdf5
