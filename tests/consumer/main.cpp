// A program using kdist as a consumer would: the guide's kernel layout on a static mesh over the
// running processes, built shard by shard, gathered back and checked.
#include <kdist/kdist.hpp>

#include <cstdio>

int main(int argc, char** argv) {
  kdist::ScopeGuard guard(argc, argv);
  using Mesh = kdist::DeviceMesh<kdist::axis<"data", 1>, kdist::axis<"model">>;
  Mesh mesh(kdist::list_devices());
  kdist::TensorLayout<Mesh, kdist::replicated, "model"> layout(mesh);
  auto w = kdist::distribute_tensor<float**>(
      [](std::size_t i, std::size_t j) { return static_cast<float>(i * 200 + j); }, {784, 200},
      layout);
  auto full = kdist::full_tensor(w);
  int bad = 0;
  for (std::size_t i = 0; i < 784; ++i)
    for (std::size_t j = 0; j < 200; ++j) bad += full(i, j) != static_cast<float>(i * 200 + j);
  if (kdist::process_id() == 0) {
    std::printf("%s\n%s\n", layout.to_string().c_str(), bad ? "consumer FAILED" : "consumer ok");
  }
  return bad ? 1 : 0;
}
