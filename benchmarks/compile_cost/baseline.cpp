// Compile-cost baseline: the includes of meshes_and_layouts.cpp and nothing instantiated.
#include <array>
#include <cstddef>
#include <string_view>
#include <utility>

#include <kdist/core/layout.hpp>
#include <kdist/core/runtime_layout.hpp>

std::size_t kdist_compile_cost() {
  return 0;
}
