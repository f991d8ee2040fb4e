#pragma once
//! \file error.hpp
//! kdist's exceptions (run-time errors) and the home of its compile-time diagnostics.
//!
//! Run-time errors mirror Keras: a bad argument value is a `kdist::ValueError` (Keras raises
//! `ValueError`), a problem of the running environment (MPI world, environment variables, devices)
//! is a `kdist::RuntimeError`. Both derive from `kdist::Error`, so `catch (const kdist::Error&)`
//! catches everything kdist throws. Messages say what was wrong and how to fix it; the catalogue is
//! docs/errors.md.

#include <stdexcept>
#include <string>

namespace kdist {

//! Base of every exception kdist throws.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

//! A bad argument value: a shape, an axis name, a layout, a regular expression...
class ValueError : public Error {
 public:
  using Error::Error;
};

//! A problem of the running environment: MPI, Kokkos, environment variables, devices.
class RuntimeError : public Error {
 public:
  using Error::Error;
};

//! Compile-time diagnostics. Each is an incomplete class template: when a check fails, kdist
//! instantiates it, and the compiler prints its arguments (the offending axis, layout or mesh)
//! in the error message. The comment beside each says how to fix it; docs/errors.md lists them.
namespace error {}

}  // namespace kdist

namespace kdist::detail {

//! Instantiates `Error` (an incomplete type) only when `Ok` is false, so the compiler prints the
//! diagnostic's arguments; used as `static_assert(diagnose<cond, error::x<...>>::value, "...")`.
template <bool Ok, class Error>
struct diagnose {
  static constexpr bool value = true;
};
template <class Error>
struct diagnose<false, Error> {
  static constexpr bool value = sizeof(Error) > 0;  // error: incomplete type names the problem
};

}  // namespace kdist::detail
