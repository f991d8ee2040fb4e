// Compile-time facts of Kokkos data types and the static extents of typed tensors (issue 10).
// Built = passed.
#include <kdist/core/detail/data_type_extents.hpp>
#include <kdist/core/layout.hpp>

#include <array>
#include <span>
#include <type_traits>

namespace {

using kdist::dynamic_extent;
using kdist::detail::data_type_extents;
using kdist::detail::data_type_with_extents;
using kdist::detail::dynamic_data_type_t;
using kdist::detail::static_shape_string;

// Kokkos spells run-time extents first (*), static ones last ([N]); as C++ types float*[6] is an
// array of 6 float*, which must read as (?, 6), not (6, ?).
static_assert(data_type_extents<float**>::extents == std::array{dynamic_extent, dynamic_extent});
static_assert(data_type_extents<float* [6]>::extents ==
              std::array<std::size_t, 2>{dynamic_extent, 6});
static_assert(data_type_extents<double[8][6]>::extents == std::array<std::size_t, 2>{8, 6});
static_assert(data_type_extents<float** [3][4]>::extents ==
              std::array<std::size_t, 4>{dynamic_extent, dynamic_extent, 3, 4});
static_assert(data_type_extents<float[]>::extents == std::array{dynamic_extent});
static_assert(data_type_extents<float>::rank == 0);
static_assert(std::is_same_v<data_type_extents<const double* [2]>::value_type, const double>);

static_assert(std::is_same_v<dynamic_data_type_t<float[784][200]>, float**>);
static_assert(std::is_same_v<dynamic_data_type_t<float* [200]>, float**>);
static_assert(std::is_same_v<dynamic_data_type_t<double***>, double***>);

// Back to Kokkos' spelling: a static extent before a run-time one becomes run-time.
static_assert(std::is_same_v<data_type_with_extents<float, 8, 6>::type, float[8][6]>);
static_assert(std::is_same_v<data_type_with_extents<float, dynamic_extent, 6>::type, float* [6]>);
static_assert(std::is_same_v<data_type_with_extents<float, 8, dynamic_extent>::type, float**>);
static_assert(
    std::is_same_v<data_type_with_extents<float, dynamic_extent, 3, 4>::type, float* [3][4]>);
static_assert(std::is_same_v<data_type_with_extents<double>::type, double>);
struct Extents {
  static constexpr std::array<std::size_t, 3> extents{dynamic_extent, dynamic_extent, 5};
};
static_assert(std::is_same_v<kdist::detail::data_type_from<float, Extents>::type, float** [5]>);

static_assert(static_shape_string<float[784][200]>().view() == "(784, 200)");
static_assert(static_shape_string<float* [784]>().view() == "(?, 784)");
static_assert(static_shape_string<float[10]>().view() == "(10,)");

constexpr std::array<std::size_t, 2> shape{8, 5};
static_assert(kdist::detail::first_static_extent_mismatch<float[8][6]>(std::span(shape)) == 1);
static_assert(kdist::detail::first_static_extent_mismatch<float* [5]>(std::span(shape)) == 2);

// A layout's static local extent: static global extent, static mesh axes, even division.
using Mesh = kdist::DeviceMesh<kdist::axis<"data">, kdist::axis<"model", 4>>;
using Kernel = kdist::TensorLayout<Mesh, kdist::replicated, "model">;
static_assert(Kernel::static_local_extent(0, 784) == 784);
static_assert(Kernel::static_local_extent(1, 200) == 50);
static_assert(Kernel::static_local_extent(1, 202) == dynamic_extent);  // blocks of 51 and 49
static_assert(Kernel::static_local_extent(1, dynamic_extent) == dynamic_extent);
using Rows = kdist::TensorLayout<Mesh, "data", kdist::replicated>;
static_assert(Rows::static_local_extent(0, 64) == dynamic_extent);  // 'data' is run-time
// An EvenTensorLayout checks the static extents it is given, and leaves run-time ones be.
static_assert(kdist::EvenTensorLayout<Mesh, kdist::replicated,
                                      "model">::check_static_shape<dynamic_extent, 200>());

}  // namespace
