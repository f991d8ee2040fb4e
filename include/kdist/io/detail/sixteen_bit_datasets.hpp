#pragma once
//! \file io/detail/sixteen_bit_datasets.hpp
//! Datasets of 16-bit floats as Keras writes them (issue 37): under the "bfloat16" and "float16"
//! dtype policies Keras' `save_weights` stores every variable and optimizer slot in 16 bits -
//! float16 as an HDF5 IEEE half (h5py's type: 1 sign, 5 exponent, 10 mantissa bits, bias 15), and
//! bfloat16, which HDF5 has no type for, as 2-byte opaque values with the attribute
//! `dtype = "bfloat16"` (a variable-length string, h5py's). kdist reads both into its float32 or
//! float64 tensors (widening is exact) and writes them when asked (KerasWeightsOptions::dtype),
//! rounding to nearest, ties to even, as Keras' cast does. The 16-bit words move as they are stored
//! (no HDF5 conversion: HDF5 1.10 rounds floats its own way); kdist converts them.

#include <hdf5.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <kdist/core/bfloat16.hpp>
#include <kdist/core/float16.hpp>
#include <kdist/io/detail/hdf5.hpp>
#include <kdist/nn/dtype_policy.hpp>

namespace kdist::detail::checkpoint {

//! How a dataset's values are stored: as the tensor's own type (HDF5 converts float32 and
//! float64 both ways), or as 16-bit words kdist converts.
enum class StoredAs { native, float16, bfloat16 };

//! The Keras dtype name of a storage ("float16", "bfloat16"; "" for native).
inline const char* dtype_of(StoredAs s) {
  return s == StoredAs::float16 ? "float16" : s == StoredAs::bfloat16 ? "bfloat16" : "";
}

//! The storage of a variable of dtype `d` (kdist/nn/sixteen_bit_variables.hpp): its own 16 bits,
//! else native.
inline StoredAs stored_as(DType d) {
  return d == DType::bfloat16  ? StoredAs::bfloat16
         : d == DType::float16 ? StoredAs::float16
                               : StoredAs::native;
}

//! The HDF5 file type of a 16-bit storage: h5py's IEEE half, or a 2-byte opaque type.
inline hdf5::Datatype sixteen_bit_type(StoredAs s) {
  if (s == StoredAs::bfloat16) {
    return hdf5::Datatype(hdf5::check(H5Tcreate(H5T_OPAQUE, 2), "H5Tcreate"));
  }
  hdf5::Datatype t(hdf5::check(H5Tcopy(H5T_IEEE_F32LE), "H5Tcopy"));
  hdf5::check(H5Tset_fields(t.get(), 15, 10, 5, 0, 10), "H5Tset_fields");
  hdf5::check(H5Tset_size(t.get(), 2), "H5Tset_size");
  hdf5::check(H5Tset_ebias(t.get(), 15), "H5Tset_ebias");
  return t;
}

//! How dataset `ds` (of type `type`) stores its values: a 2-byte float is float16 (IEEE half), a
//! 2-byte opaque value with `dtype = "bfloat16"` bfloat16; anything else native (its checks are
//! the caller's).
inline StoredAs stored_as(hid_t ds, hid_t type) {
  if (H5Tget_size(type) != 2) return StoredAs::native;
  const H5T_class_t cls = H5Tget_class(type);
  if (cls == H5T_FLOAT) return StoredAs::float16;
  std::vector<std::string> dtype;
  if (cls == H5T_OPAQUE && hdf5::read_strings(ds, "dtype", dtype) && dtype.size() == 1 &&
      dtype[0] == "bfloat16") {
    return StoredAs::bfloat16;
  }
  return StoredAs::native;
}

//! Whether a 2-byte float type is IEEE half (the only 16-bit float Keras writes).
inline bool is_ieee_half(hid_t type) {
  std::size_t spos = 0, epos = 0, esize = 0, mpos = 0, msize = 0;
  return H5Tget_fields(type, &spos, &epos, &esize, &mpos, &msize) >= 0 && spos == 15 &&
         epos == 10 && esize == 5 && mpos == 0 && msize == 10 && H5Tget_ebias(type) == 15;
}

//! `values` rounded to the 16-bit storage `s` (to nearest, ties to even).
template <class T>
std::vector<std::uint16_t> to_sixteen_bit(std::span<const T> values, StoredAs s) {
  std::vector<std::uint16_t> out(values.size());
  for (std::size_t i = 0; i < values.size(); ++i) {
    const auto x = static_cast<float>(values[i]);
    out[i] = s == StoredAs::bfloat16 ? to_bfloat16_bits(x) : to_float16_bits(x);
  }
  return out;
}

//! Widens, in place, the `n` 16-bit words of storage `s` at the start of `data` into the `n`
//! values of `data` (exact): from the last to the first, so that no word is overwritten before it
//! is read (value i covers words 2i.. or 4i.., at or after word i).
template <class T>
void widen_in_place(T* data, std::size_t n, StoredAs s) {
  static_assert(sizeof(T) >= 4, "widen_in_place: the values are float32 or float64");
  const auto* words = reinterpret_cast<const unsigned char*>(data);
  for (std::size_t i = n; i-- > 0;) {
    std::uint16_t w = 0;
    std::memcpy(&w, words + 2 * i, 2);
    data[i] =
        static_cast<T>(s == StoredAs::bfloat16 ? from_bfloat16_bits(w) : from_float16_bits(w));
  }
}

//! Writes the variable-length string attribute `name` = `value` (h5py's str attributes, which
//! Keras compares with Python strings).
inline void write_variable_string(hid_t obj, const char* name, const std::string& value) {
  hdf5::Datatype type(hdf5::check(H5Tcopy(H5T_C_S1), "H5Tcopy"));
  hdf5::check(H5Tset_size(type.get(), H5T_VARIABLE), "H5Tset_size");
  hdf5::check(H5Tset_cset(type.get(), H5T_CSET_UTF8), "H5Tset_cset");
  const char* text = value.c_str();
  hdf5::write_attribute(obj, name, type.get(), std::nullopt, &text);
}

}  // namespace kdist::detail::checkpoint
