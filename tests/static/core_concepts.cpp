// The concepts of kdist/core/concepts.hpp and core/runtime_concepts.hpp name the traits and
// combinations the signatures used to spell out in `requires` clauses: each one says here what it
// accepts and what it refuses.
// Built = passed (also under plain nvcc, tests/nvcc.cmake).
#include <kdist/core/concepts.hpp>
#include <kdist/core/runtime_concepts.hpp>

#include <array>
#include <cstddef>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace {

using kdist::axis;
using kdist::replicated;
using Mesh = kdist::DeviceMesh<axis<"data">, axis<"model", 2>>;
using Layout = kdist::TensorLayout<Mesh, replicated, "model">;
using Even = kdist::EvenTensorLayout<Mesh, "data", replicated>;
using Pending = kdist::PendingSum<Layout, "data">;

static_assert(kdist::StaticMesh<Mesh> && !kdist::StaticMesh<kdist::RuntimeDeviceMesh>);
static_assert(kdist::StaticLayout<Layout> && kdist::StaticLayout<Even>);
static_assert(!kdist::StaticLayout<Pending> && !kdist::StaticLayout<kdist::RuntimeTensorLayout>);
static_assert(kdist::TypedTensorLayout<Layout> && kdist::TypedTensorLayout<Pending>);
static_assert(!kdist::TypedTensorLayout<kdist::RuntimeTensorLayout>);

static_assert(kdist::DynamicDataType<float**> && !kdist::DynamicDataType<float* [4]>);
static_assert(kdist::StaticDataType<float[3][4]> && !kdist::StaticDataType<float* [4]>);
static_assert(kdist::SameDynamicDataType<float[3][4], float**>);
static_assert(!kdist::SameDynamicDataType<float[3][4], double**>);
static_assert(!kdist::SameDynamicDataType<float[3][4], float*>);

constexpr auto f2 = [](std::size_t i, std::size_t j) { return float(i + j); };
static_assert(kdist::IndexFunction<decltype(f2), float**>);
static_assert(kdist::IndexFunction<decltype(f2), const double[3][4]>);  // converts
static_assert(!kdist::IndexFunction<decltype(f2), float*>);             // one index
static_assert(!kdist::IndexFunction<const float*, float**>);            // not a function

constexpr auto body = [](int, char**) { return 0; };
static_assert(kdist::MainFunction<decltype(body)> && kdist::MainFunction<decltype(body)&>);
static_assert(!kdist::MainFunction<decltype(f2)>);

static_assert(kdist::ShapeRange<std::vector<int>> && kdist::ShapeRange<std::array<long, 2>>);
static_assert(!kdist::ShapeRange<std::vector<std::size_t>>);  // the span overload takes it
static_assert(!kdist::ShapeRange<std::vector<float>> && !kdist::ShapeRange<int>);

static_assert(kdist::SameUnqualified<const kdist::RuntimeDeviceMesh&, kdist::RuntimeDeviceMesh>);
static_assert(!kdist::SameUnqualified<Mesh, kdist::RuntimeDeviceMesh>);
static_assert(kdist::DifferentFrom<Layout, Even> && !kdist::DifferentFrom<const Layout&, Layout>);

static_assert(kdist::ConvertibleToRuntimeMesh<Mesh>);
static_assert(!kdist::ConvertibleToRuntimeMesh<kdist::RuntimeDeviceMesh>);
// RuntimeLayoutMap's constructor once also refused std::optional<RuntimeDeviceMesh> by name:
static_assert(!kdist::ConvertibleToRuntimeMesh<std::optional<kdist::RuntimeDeviceMesh>>);
static_assert(kdist::ConvertibleToRuntimeLayout<const Layout&>);
static_assert(!kdist::ConvertibleToRuntimeLayout<kdist::RuntimeTensorLayout&&>);

static_assert(kdist::RuntimeLayoutRule<std::vector<kdist::DimAxes>&>);
static_assert(kdist::RuntimeLayoutRule<const kdist::RuntimeTensorLayout&>);
static_assert(!kdist::RuntimeLayoutRule<Layout> && !kdist::RuntimeLayoutRule<std::string>);

}  // namespace
