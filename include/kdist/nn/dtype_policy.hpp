#pragma once
//! \file nn/dtype_policy.hpp
//! Keras' dtype policies: `kdist::DTypePolicy` and `kdist::mixed_precision::set_global_policy`,
//! the same names and meaning as `keras.DTypePolicy` / `keras.mixed_precision.set_global_policy`.
//! A policy names the dtype a layer computes in (its inputs, outputs and the activations it keeps
//! for its backward pass) and the dtype of its variables:
//!
//! | name             | compute_dtype | variable_dtype |
//! |------------------|---------------|----------------|
//! | "float32"        | float32       | float32        |
//! | "mixed_bfloat16" | bfloat16      | float32        |
//! | "mixed_float16"  | float16       | float32        |
//! | "bfloat16"       | bfloat16      | bfloat16       |
//! | "float16"        | float16       | float16        |
//! | "float64"        | float64       | float64        |
//!
//! A layer takes the global policy when it is created (held by a kdist::AnyLayer, as Keras' layer
//! takes it when constructed), or the one `kdist::with_dtype_policy(policy, layer)` gives it (Keras'
//! `dtype=` argument). How kdist computes under a 16-bit policy: kdist/nn/autocast.hpp.
//!
//! \code
//! kdist::mixed_precision::set_global_policy("mixed_bfloat16");
//! kdist::Sequential model({kdist::layers::Flatten("f"), kdist::layers::Dense(200, relu, "d1"),
//!                          kdist::with_dtype_policy("float32", kdist::layers::Dense(10, softmax,
//!                                                                                   "d2"))});
//! \endcode

#include <optional>
#include <string>
#include <string_view>
#include <type_traits>

#include <kdist/core/bfloat16.hpp>
#include <kdist/core/error.hpp>
#include <kdist/core/float16.hpp>

namespace kdist {

//! The floating-point dtypes of Keras' policies that kdist computes in.
enum class DType { float16, bfloat16, float32, float64 };

//! Keras' name of `d` ("float32", ...).
constexpr std::string_view dtype_name(DType d) noexcept {
  switch (d) {
    case DType::float16:
      return "float16";
    case DType::bfloat16:
      return "bfloat16";
    case DType::float32:
      return "float32";
    case DType::float64:
      return "float64";
  }
  return "float32";
}

//! The dtype named `name` (Keras' names, plus "float", "double", "half" as
//! keras.backend.standardize_dtype reads them), or nothing.
constexpr std::optional<DType> dtype_from_name(std::string_view name) noexcept {
  if (name == "float16" || name == "half") return DType::float16;
  if (name == "bfloat16") return DType::bfloat16;
  if (name == "float32" || name == "float") return DType::float32;
  if (name == "float64" || name == "double") return DType::float64;
  return std::nullopt;
}

//! The dtype of scalars `T` (float, double, kdist::bfloat16, kdist::float16).
template <class T>
constexpr DType dtype_of() noexcept {
  using U = std::remove_cv_t<T>;
  static_assert(std::is_same_v<U, float> || std::is_same_v<U, double> ||
                    std::is_same_v<U, bfloat16> || std::is_same_v<U, float16>,
                "kdist::dtype_of: T is float, double, kdist::bfloat16 or kdist::float16");
  if constexpr (std::is_same_v<U, float16>) {
    return DType::float16;
  } else if constexpr (std::is_same_v<U, bfloat16>) {
    return DType::bfloat16;
  } else if constexpr (std::is_same_v<U, double>) {
    return DType::float64;
  } else {
    return DType::float32;
  }
}

//! Whether `d` is 16 bits wide (what a layer's kept activations shrink to).
constexpr bool is_sixteen_bit(DType d) noexcept {
  return d == DType::float16 || d == DType::bfloat16;
}

class DTypePolicy;
namespace mixed_precision {
DTypePolicy global_policy();
}

//! Keras' DTypePolicy: a name, the dtype layers compute in and the dtype of their variables.
class DTypePolicy {
 public:
  //! The global policy (Keras' `DTypePolicy()`: kdist::mixed_precision::global_policy()).
  DTypePolicy();
  //! The policy named `name`. Errors: kdist::ValueError with Keras' message for a name that is
  //! neither a mixed policy nor a float dtype.
  DTypePolicy(std::string_view name) : name_(name) {  // NOLINT: a name converts, as in Keras
    if (name == "mixed_float16") {
      compute_ = DType::float16;
      variable_ = DType::float32;
    } else if (name == "mixed_bfloat16") {
      compute_ = DType::bfloat16;
      variable_ = DType::float32;
    } else if (const auto d = dtype_from_name(name)) {
      compute_ = variable_ = *d;
    } else {
      throw ValueError("Cannot convert '" + std::string(name) +
                       "' to a mixed precision DTypePolicy. Valid policies include "
                       "'mixed_float16', 'mixed_bfloat16', and the name of any float dtype such "
                       "as 'float32'.");
    }
  }
  DTypePolicy(const char* name) : DTypePolicy(std::string_view(name)) {}         // NOLINT
  DTypePolicy(const std::string& name) : DTypePolicy(std::string_view(name)) {}  // NOLINT

  const std::string& name() const noexcept { return name_; }
  //! The dtype a layer computes in, as Keras names it ("bfloat16" for "mixed_bfloat16").
  std::string_view compute_dtype() const noexcept { return dtype_name(compute_); }
  //! The dtype of a layer's variables ("float32" for "mixed_bfloat16").
  std::string_view variable_dtype() const noexcept { return dtype_name(variable_); }
  DType compute() const noexcept { return compute_; }
  DType variable() const noexcept { return variable_; }
  //! `<DTypePolicy "mixed_bfloat16">`, as Keras' repr.
  std::string repr() const { return "<DTypePolicy \"" + name_ + "\">"; }

  //! Same name (Keras' __eq__).
  friend bool operator==(const DTypePolicy& a, const DTypePolicy& b) { return a.name_ == b.name_; }

 private:
  std::string name_;
  DType compute_ = DType::float32;
  DType variable_ = DType::float32;
};

namespace mixed_precision {
namespace detail {
inline DTypePolicy& global() {
  // Per thread, as Keras' global_state (thread-local attributes).
  thread_local DTypePolicy policy(std::string_view("float32"));
  return policy;
}
}  // namespace detail

//! Keras' `keras.mixed_precision.set_global_policy` (`keras.config.set_dtype_policy`): the policy
//! the layers created from now on, on this thread, take. Errors: kdist::ValueError for an unknown
//! name (DTypePolicy's message).
inline void set_global_policy(const DTypePolicy& policy) {
  detail::global() = policy;
}
inline void set_dtype_policy(const DTypePolicy& policy) {
  set_global_policy(policy);
}
//! Keras' `keras.mixed_precision.global_policy()` (`keras.config.dtype_policy()`); "float32" until
//! one is set.
inline DTypePolicy global_policy() {
  return detail::global();
}
inline DTypePolicy dtype_policy() {
  return global_policy();
}

//! The global policy set for as long as it lives, the previous one again after (for tests and for
//! code that builds one model under a policy without changing its callers').
class PolicyScope {
 public:
  explicit PolicyScope(const DTypePolicy& policy) : saved_(global_policy()) {
    set_global_policy(policy);
  }
  PolicyScope(const PolicyScope&) = delete;
  PolicyScope& operator=(const PolicyScope&) = delete;
  ~PolicyScope() { set_global_policy(saved_); }

 private:
  DTypePolicy saved_;
};
}  // namespace mixed_precision

inline DTypePolicy::DTypePolicy() : DTypePolicy(mixed_precision::global_policy()) {}

}  // namespace kdist
