// Fuzz target: run-time mesh and layout construction, and the blocks they give a tensor.
// Input lines (tests/fuzz/corpus/runtime_layout/ has examples):
//   mesh <extent>...     the mesh shape            names <name>...   its axis names
//   devices <count>      the device count          even              the layout demands even division
//   layout <dim>...      '.', 'a' or 'a,b' per tensor dimension
//   shape <extent>...    the tensor's global shape
// kdist::Error for a bad mesh, layout or shape is the expected outcome; anything else (another
// exception, a signal, a sanitizer report, a broken invariant below) is a defect.
#include <kdist/core/runtime_layout.hpp>
#include <kdist/core/runtime_mesh.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "fuzz_text.hpp"

namespace {

// A valid mesh of N devices names them all ("cpu:0".."cpu:N-1"): that allocation is legitimate,
// so inputs asking for more are skipped. Invalid shapes of any size must still fail fast.
constexpr std::size_t max_devices = std::size_t{1} << 16;
// Devices whose blocks are checked (all of them on smaller meshes).
constexpr std::size_t checked_devices = 512;

void check_blocks(const kdist::RuntimeTensorLayout& layout, const kdist::RuntimeDeviceMesh& mesh,
                  const std::vector<std::size_t>& shape) {
  const std::size_t n = std::min(mesh.size(), checked_devices);
  for (std::size_t d = 0; d < shape.size(); ++d) {
    std::vector<kdist::Block> blocks;
    for (std::size_t dev = 0; dev < n; ++dev) {
      const auto ext = layout.local_extents(shape, dev);
      const auto off = layout.offsets(shape, dev);
      KDIST_FUZZ_CHECK(ext.size() == shape.size() && off.size() == shape.size());
      KDIST_FUZZ_CHECK(off[d] <= shape[d] && ext[d] <= shape[d] - off[d]);  // inside the tensor
      blocks.push_back({off[d], ext[d]});
    }
    if (n != mesh.size()) continue;
    // The distinct blocks of a dimension tile it: sorted, each starts where the last ended.
    std::sort(blocks.begin(), blocks.end(), [](auto a, auto b) {
      return a.offset != b.offset ? a.offset < b.offset : a.extent < b.extent;
    });
    blocks.erase(std::unique(blocks.begin(), blocks.end()), blocks.end());
    std::size_t end = 0;
    for (const auto& b : blocks) {
      if (b.extent == 0) continue;
      KDIST_FUZZ_CHECK(b.offset == end);
      end = b.offset + b.extent;
    }
    KDIST_FUZZ_CHECK(end == shape[d]);
    if (layout.division() == kdist::Division::even) {
      for (const auto& b : blocks) KDIST_FUZZ_CHECK(b.extent * layout.shards(d) == shape[d]);
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::vector<std::size_t> mesh_shape;
  std::vector<std::string> names;
  std::size_t devices = 0;
  std::vector<kdist::DimAxes> axes;
  std::optional<std::vector<std::size_t>> shape;
  auto division = kdist::Division::chunk;
  for (const auto& w : kdist::fuzz::lines(data, size)) {
    if (w[0] == "mesh") {
      if (auto v = kdist::fuzz::numbers(w)) mesh_shape = *v;
    } else if (w[0] == "names") {
      names.assign(w.begin() + 1, w.end());
    } else if (w[0] == "devices" && w.size() == 2) {
      if (auto v = kdist::fuzz::number(w[1])) devices = static_cast<std::size_t>(*v);
    } else if (w[0] == "layout") {
      axes = kdist::fuzz::layout_axes<kdist::DimAxes>(w, 1);
    } else if (w[0] == "even") {
      division = kdist::Division::even;
    } else if (w[0] == "shape") {
      shape = kdist::fuzz::numbers(w);
    }
  }
  if (devices > max_devices || mesh_shape.size() > 16 || axes.size() > 16) return 0;
  try {
    const kdist::RuntimeDeviceMesh mesh(mesh_shape, names, devices);
    KDIST_FUZZ_CHECK(mesh.size() == devices && mesh.devices().size() == devices);
    const kdist::RuntimeTensorLayout layout(axes, mesh, division);
    (void)layout.to_string();
    if (!shape) return 0;
    layout.check_shape(*shape);
    check_blocks(layout, mesh, *shape);
    // The owners of the last element each hold it.
    if (std::none_of(shape->begin(), shape->end(), [](auto e) { return e == 0; })) {
      std::vector<std::size_t> last(shape->size());
      for (std::size_t d = 0; d < last.size(); ++d) last[d] = (*shape)[d] - 1;
      const auto owners = layout.owners(*shape, last);
      KDIST_FUZZ_CHECK(!owners.empty());
      for (auto dev : owners) {
        const auto off = layout.offsets(*shape, dev);
        const auto ext = layout.local_extents(*shape, dev);
        for (std::size_t d = 0; d < last.size(); ++d) {
          KDIST_FUZZ_CHECK(off[d] <= last[d] && last[d] - off[d] < ext[d]);
        }
      }
    }
  } catch (const kdist::Error& e) {
    kdist::fuzz::expected_error(e);
    // the documented outcome for a bad mesh, layout or shape
  }
  return 0;
}
