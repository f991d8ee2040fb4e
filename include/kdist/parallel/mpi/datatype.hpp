#pragma once
//! \file parallel/mpi/datatype.hpp
//! The MPI datatype of a C++ type: `kdist::mpi::datatype<double>()` is `MPI_DOUBLE`.
//!
//! Every arithmetic type has one (the fixed-width aliases `std::int64_t`, `std::uint8_t`... are
//! covered through the fundamental type they alias), as do `bool`, `std::byte`,
//! `std::complex<float>`, `std::complex<double>`, `std::complex<long double>` and
//! `kdist::bfloat16` and `kdist::float16` (their bits, MPI_UINT16_T: moved, never reduced). Other types can
//! be added by specialising `kdist::mpi::datatype_traits<T>` with a `static MPI_Datatype get()`. A
//! function rather than a constant because MPI implementations (Open MPI) define their datatypes as
//! addresses, which are not constant expressions.

#include <mpi.h>

#include <complex>
#include <concepts>
#include <cstddef>
#include <type_traits>

#include <kdist/core/bfloat16.hpp>
#include <kdist/core/float16.hpp>

namespace kdist::mpi {

//! Specialise with `static MPI_Datatype get() noexcept` to give a type an MPI datatype.
//! The primary template has no `get`: such a type has no MPI datatype.
template <class T>
struct datatype_traits {};

//! True when `T` (cv-qualifiers ignored) has an MPI datatype.
template <class T>
inline constexpr bool has_datatype_v = requires {
  { datatype_traits<std::remove_cv_t<T>>::get() } -> std::same_as<MPI_Datatype>;
};

//! The MPI datatype of `T` (cv-qualifiers ignored). A type without one is a compile error.
//! Example: `MPI_Allreduce(MPI_IN_PLACE, p, n, kdist::mpi::datatype<float>(), MPI_SUM, comm);`
template <class T>
[[nodiscard]] inline MPI_Datatype datatype() noexcept {
  static_assert(has_datatype_v<T>,
                "kdist::mpi::datatype<T>: T has no MPI datatype; use an arithmetic type, bool, "
                "std::byte or std::complex, or specialise kdist::mpi::datatype_traits<T>");
  if constexpr (has_datatype_v<T>) {
    return datatype_traits<std::remove_cv_t<T>>::get();
  } else {
    return MPI_DATATYPE_NULL;  // not reached: the static_assert above stops the build
  }
}

}  // namespace kdist::mpi

//! \cond internal
#define KDIST_DETAIL_MPI_DATATYPE(type, mpi_type)           \
  template <>                                               \
  struct kdist::mpi::datatype_traits<type> {                \
    static MPI_Datatype get() noexcept { return mpi_type; } \
  };
KDIST_DETAIL_MPI_DATATYPE(char, MPI_CHAR)
KDIST_DETAIL_MPI_DATATYPE(signed char, MPI_SIGNED_CHAR)
KDIST_DETAIL_MPI_DATATYPE(unsigned char, MPI_UNSIGNED_CHAR)
KDIST_DETAIL_MPI_DATATYPE(wchar_t, MPI_WCHAR)
KDIST_DETAIL_MPI_DATATYPE(short, MPI_SHORT)
KDIST_DETAIL_MPI_DATATYPE(unsigned short, MPI_UNSIGNED_SHORT)
KDIST_DETAIL_MPI_DATATYPE(int, MPI_INT)
KDIST_DETAIL_MPI_DATATYPE(unsigned int, MPI_UNSIGNED)
KDIST_DETAIL_MPI_DATATYPE(long, MPI_LONG)
KDIST_DETAIL_MPI_DATATYPE(unsigned long, MPI_UNSIGNED_LONG)
KDIST_DETAIL_MPI_DATATYPE(long long, MPI_LONG_LONG)
KDIST_DETAIL_MPI_DATATYPE(unsigned long long, MPI_UNSIGNED_LONG_LONG)
KDIST_DETAIL_MPI_DATATYPE(float, MPI_FLOAT)
KDIST_DETAIL_MPI_DATATYPE(double, MPI_DOUBLE)
KDIST_DETAIL_MPI_DATATYPE(kdist::bfloat16, MPI_UINT16_T)  // moved as its bits, never summed by MPI
KDIST_DETAIL_MPI_DATATYPE(kdist::float16, MPI_UINT16_T)   // likewise
KDIST_DETAIL_MPI_DATATYPE(long double, MPI_LONG_DOUBLE)
KDIST_DETAIL_MPI_DATATYPE(bool, MPI_CXX_BOOL)
KDIST_DETAIL_MPI_DATATYPE(std::byte, MPI_BYTE)
KDIST_DETAIL_MPI_DATATYPE(std::complex<float>, MPI_CXX_FLOAT_COMPLEX)
KDIST_DETAIL_MPI_DATATYPE(std::complex<double>, MPI_CXX_DOUBLE_COMPLEX)
KDIST_DETAIL_MPI_DATATYPE(std::complex<long double>, MPI_CXX_LONG_DOUBLE_COMPLEX)
#undef KDIST_DETAIL_MPI_DATATYPE
//! \endcond
