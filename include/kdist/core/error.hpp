#pragma once
//! \file core/error.hpp
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

//! Compile-time diagnostics. Each is an incomplete class template whose arguments name the
//! offender (the axis, the layout, the mesh): a failed check is a `static_assert` whose condition
//! is `detail::diagnose<false, error::x<...>>::value`, so GCC and clang print, in one error, the
//! message in the user's words and that condition with the diagnostic's arguments. The comment
//! beside each says how to fix it; docs/errors.md lists them.
namespace error {}

}  // namespace kdist

namespace kdist::detail {

//! `diagnose<Ok, Error>::value` is `Ok`; used as
//! `static_assert(diagnose<cond, error::x<...>>::value, "what is wrong, in the user's words")`.
//! When `cond` is false the compiler prints the message and the failed condition, whose type
//! `error::x<...>` names the offender: GCC as "'diagnose<false, error::x<...> >::value' evaluates
//! to false", clang as "static_assert failed due to requirement 'diagnose<false, ...>::value'".
//! (`Error` is never instantiated, so nothing else fails after the one message.)
template <bool Ok, class Error>
struct diagnose {
  static constexpr bool value = Ok;
};

}  // namespace kdist::detail
