// The Keras distribution notebook's three programs, as written there, in C++:
//   a() no distribution, b() DataParallel, c() ModelParallel with the guide's LayoutMap on the
//   meshes (2, 1), (8, 1), (4, 2), (2, 4), (1, 8) - those whose size is the number of processes.
// Each: inputs normal(128, 28, 28, 1), targets normal(128, 10), batches of 16 in order (the
// notebook's tf.data pipeline), Flatten -> Dense(200, relu, no bias) -> Dropout(0.4) ->
// Dense(10, softmax), compile(loss="mse") (RMSprop, Keras' default optimizer), fit 3 epochs,
// evaluate. The same numbers on every mesh is the distribution API's promise; the last lines say
// whether they were (a() and b() name their layers as Keras does, "dense" and "dense_1"; c() names
// them "d1" and "d2", so its initial weights, keyed by path, are other ones).
//   mpiexec -n 2 build/examples/seeds_programs            # a, b, c on (2, 1)
//   mpiexec -n 8 build/examples/seeds_programs --epochs 1 # c on the four 8-device meshes
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include <kdist/nn/model.hpp>
#include <kdist/parallel/run.hpp>
#include <kdist/strategy/data_parallel.hpp>
#include <kdist/strategy/layout_map.hpp>
#include <kdist/strategy/model_parallel.hpp>

#include "common/seeds_model.hpp"

namespace {

using kdist::examples::seeds_data;
using kdist::examples::seeds_model;

using Mesh2D = kdist::DeviceMesh<kdist::axis<"data">, kdist::axis<"model">>;

// model.compile(loss="mse"); model.fit(dataset, epochs=...); model.evaluate(dataset)
double compile_fit_evaluate(kdist::Sequential m, const kdist::ArrayDataset<float>& data,
                            std::size_t epochs, int verbose) {
  m.compile(kdist::Loss::mean_squared_error);  // the global distribution; RMSprop
  m.fit(data, {.batch_size = 16, .epochs = epochs, .shuffle = false, .verbose = verbose});
  return m.evaluate(data, {.batch_size = 16, .verbose = verbose}).loss;
}

}  // namespace

int main(int argc, char** argv) {
  return kdist::run(argc, argv, [](int ac, char** av) {
    CLI::App app("The Keras distribution notebook's three programs");
    std::size_t epochs = 3;
    std::string program = "all";
    bool quiet = false;
    app.add_option("--epochs", epochs, "epochs of each fit")->check(CLI::Range(1, 1000));
    app.add_option("--program", program, "a, b, c or all")
        ->check(CLI::IsMember({"a", "b", "c", "all"}));
    app.add_flag("--quiet", quiet, "only the summary");
    try {
      app.parse(ac, av);
    } catch (const CLI::CallForHelp&) {
      if (kdist::process_id() == 0) std::printf("%s", app.help().c_str());
      return 0;
    } catch (const CLI::ParseError& e) {
      throw kdist::ValueError(std::string("seeds_programs: ") + e.what() + "; see --help");
    }
    const bool root = kdist::process_id() == 0;
    const int verbose = quiet ? 0 : 1;
    const auto data = seeds_data();
    const auto devices = kdist::list_devices();
    std::vector<std::pair<std::string, double>> results;

    if (program == "a" || program == "all") {  // def a(): no distribution
      if (root) std::printf("a(): no distribution\n");
      kdist::set_distribution(nullptr);
      results.emplace_back(
          "a()", compile_fit_evaluate(seeds_model("dense", "dense_1"), data, epochs, verbose));
    }
    if (program == "b" || program == "all") {  // def b(): DataParallel on a 1-D mesh
      const kdist::DeviceMesh<kdist::axis<"data">> mesh_1d({devices.size()}, devices);
      kdist::set_distribution(std::make_shared<kdist::DataParallel>(mesh_1d));
      if (root) std::printf("b(): DataParallel on %s\n", mesh_1d.to_string().c_str());
      results.emplace_back(
          "b()", compile_fit_evaluate(seeds_model("dense", "dense_1"), data, epochs, verbose));
    }
    if (program == "c" || program == "all") {  // ModelParallel and LayoutMap, every mesh shape
      const std::vector<std::array<std::size_t, 2>> shapes{{2, 1}, {8, 1}, {4, 2}, {2, 4}, {1, 8}};
      for (const auto& shape : shapes) {
        if (shape[0] * shape[1] != devices.size()) continue;
        const Mesh2D mesh_2d(shape, devices);
        kdist::LayoutMap layout_map{mesh_2d};
        layout_map["d1/kernel"] = {kdist::replicated, "model"};
        layout_map["d1/bias"] = {"model"};
        layout_map["d2/output"] = {"data", kdist::replicated};
        const kdist::ModelParallel model_parallel(layout_map, /*batch_dim_name=*/"data");
        kdist::set_distribution(model_parallel);
        if (root) std::printf("c(): ModelParallel on %s\n", mesh_2d.to_string().c_str());
        results.emplace_back("c() " + mesh_2d.to_string(),
                             compile_fit_evaluate(seeds_model("d1", "d2"), data, epochs, verbose));
      }
    }
    kdist::set_distribution(nullptr);
    if (results.empty()) {
      throw kdist::ValueError("seeds_programs: no program runs on " +
                              std::to_string(devices.size()) +
                              " processes; program c needs 2 or 8 (mpiexec -n 2 or -n 8)");
    }
    // Programs with the same layer names draw the same initial weights (kdist keys them by path):
    // a() and b() (Keras' automatic names "dense", "dense_1"), and c() on every mesh ("d1", "d2").
    bool agree = true;
    for (const char* group : {"ab", "c"}) {
      std::vector<std::pair<std::string, double>> members;
      for (const auto& r : results) {
        if ((r.first[0] == 'c') == (group[0] == 'c')) members.push_back(r);
      }
      if (members.size() < 2) continue;
      double worst = 0;
      for (const auto& [name, loss] : members) {
        worst = std::max(worst, std::abs(loss - members.front().second) /
                                    std::max(1e-12, std::abs(members.front().second)));
      }
      agree = agree && worst < 1e-5;
      if (root) {
        std::printf("%s: %zu runs, the same evaluate loss to %.1e relative\n",
                    group[0] == 'c' ? "c() on every mesh" : "a() and b()", members.size(), worst);
      }
    }
    for (const auto& [name, loss] : results) {
      if (root) std::printf("%s: evaluate loss %.6f\n", name.c_str(), loss);
    }
    if (root) std::printf("%zu programs agree: %s\n", results.size(), agree ? "yes" : "NO");
    return agree ? 0 : 1;
  });
}
