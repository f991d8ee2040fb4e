// kdist on a communicator of the program's (issue 22), run under mpiexec (runtime_extra.cmake):
//   halves DIR  the world split in two halves (MPI_Comm_split); each half starts kdist on its own
//               communicator and trains: half 0 DataParallel for 2 epochs, half 1 ModelParallel
//               (1, n) for 3 (a collective over the world would not match and hang). Each saves
//               and loads a checkpoint in DIR/group<g> (parallel HDF5 on the half). Then every
//               process runs kdist alone (MPI_COMM_SELF) on the same model and data: the loss must
//               be its half's. Prints "communicator groups ok (halves)".
//   appnum DIR  the same, the groups being the programs of an MPMD launch
//               (mpiexec -n 2 prog appnum DIR : -n 2 prog appnum DIR), split on MPI_APPNUM.
//   fail        half 1 fails alike on every one of its processes (kdist::run on the half) while
//               half 0 waits in a barrier of the world for it: the job must end (MPI_Abort).
//   null        kdist started on MPI_COMM_NULL: a kdist::ValueError that says what to give.
//   outside     half 0 starts kdist on its half; half 1 never does (a simulation): there
//               process_count, process_id, communicator, a kdist collective and a distribution
//               each raise a kdist::RuntimeError saying kdist was not started on this process
//               (never MPI_COMM_WORLD's answers, never a collective waiting for half 0). Prints
//               "kdist only where it was started ok".
//   one_fails   kdist::run on each half; in half 1, its process 1 (world rank 3) throws while its
//               process 0 waits in a kdist collective: the message names the group's process,
//               the world rank and the host.
//   one_stops   the same, process 1 of half 1 stopping (SIGSTOP) instead: with
//               KDIST_COLLECTIVE_TIMEOUT=2, the watchdog names it by world rank and host.
#include <mpi.h>

#include <Kokkos_Core.hpp>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <kdist/io/checkpoint.hpp>
#include <kdist/nn/model.hpp>
#include <kdist/parallel/collectives.hpp>
#include <kdist/parallel/initialize.hpp>
#include <kdist/parallel/run.hpp>
#include <kdist/strategy/data_parallel.hpp>
#include <kdist/strategy/layout_map.hpp>
#include <kdist/strategy/model_parallel.hpp>
#include <memory>
#include <string>
#include <vector>

#include "common/random_normal.hpp"

namespace {

int failures = 0;
void check(bool ok, const std::string& what) {
  if (!ok) {
    std::printf("error: %s\n", what.c_str());
    ++failures;
  }
}

kdist::Sequential make_model() {
  using namespace kdist::layers;
  std::vector<kdist::Sequential::Layer> l;
  l.emplace_back(Flatten());
  l.emplace_back(Dense(12, Activation::relu, true, "d1"));
  l.emplace_back(Dropout(0.4, "dropout"));
  l.emplace_back(Dense(10, Activation::softmax, true, "d2"));
  return kdist::Sequential({8, 8, 1}, std::move(l));
}

kdist::ArrayDataset<float> make_data() {
  return kdist::ArrayDataset<float>(kdist::examples::random_normal(48 * 64, 1), {8, 8, 1},
                                    kdist::examples::random_normal(48 * 10, 2), 10);
}

//! Group 0: DataParallel; group 1: ModelParallel over (1, n), d1 column-parallel.
std::shared_ptr<const kdist::Distribution> distribution(int group) {
  if (group == 0) return std::make_shared<kdist::DataParallel>();
  kdist::RuntimeDeviceMesh mesh({1, kdist::list_devices().size()}, {"data", "model"},
                                kdist::list_devices());
  kdist::LayoutMap map(mesh);
  map["d1/kernel"] = {kdist::replicated, "model"};
  map["d1/bias"] = {"model"};
  return std::make_shared<kdist::ModelParallel>(std::move(map), "data");
}

//! Trains group `group`'s model on kdist's current communicator; returns the last epoch's loss.
double train(int group, const std::string& checkpoint) {
  auto model = make_model();
  const auto dist = distribution(group);
  model.compile(dist, kdist::Loss::mean_squared_error, kdist::Adam(0.01), 5);
  const auto data = make_data();
  const double loss =
      model.fit(data, {.batch_size = 16, .epochs = 2 + std::size_t(group), .verbose = 0})
          .epochs.back()
          .loss;
  if (!checkpoint.empty()) {
    kdist::save_checkpoint(model, checkpoint);
    auto loaded = make_model();
    loaded.compile(dist, kdist::Loss::mean_squared_error, kdist::Adam(0.01), 7);
    kdist::load_checkpoint(loaded, checkpoint);
    const double want = model.evaluate(data, {.batch_size = 16, .verbose = 0}).loss;
    const double got = loaded.evaluate(data, {.batch_size = 16, .verbose = 0}).loss;
    check(got == want, "group " + std::to_string(group) + ": the checkpoint's loss " +
                           std::to_string(got) + " is not the model's " + std::to_string(want));
  }
  return loss;
}

int appnum() {
  int* value = nullptr;
  int found = 0;
  MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_APPNUM, &value, &found);
  return found && value != nullptr ? *value : 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  const std::string dir = argc > 2 ? argv[2] : "";
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
  int world_rank = 0;
  int world_size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world_size);

  if (mode == "null") {
    std::string message = "(no kdist::ValueError)";
    try {
      kdist::ScopeGuard guard(argc, argv, MPI_COMM_NULL);
    } catch (const kdist::ValueError& e) {
      message = e.what();
    }
    check(message.find("the communicator is MPI_COMM_NULL") != std::string::npos, message);
    std::printf("%s\n", message.c_str());
    MPI_Finalize();
    return failures == 0 ? 0 : 1;
  }

  const int color = mode == "appnum" ? appnum() : (world_rank < world_size / 2 ? 0 : 1);
  MPI_Comm group = MPI_COMM_NULL;
  MPI_Comm_split(MPI_COMM_WORLD, color, world_rank, &group);
  int group_rank = 0;
  int group_size = 0;
  MPI_Comm_rank(group, &group_rank);
  MPI_Comm_size(group, &group_size);

  if (mode == "outside") {
    if (color == 0) {
      kdist::ScopeGuard guard(argc, argv, group);
      check(kdist::process_count() == group_size, "half 0: process_count() is not its size");
    } else {
      Kokkos::ScopeGuard kokkos(argc, argv);  // the simulation's own Kokkos
      const auto refused = [&](const char* what, auto&& call) {
        std::string message = "(no kdist::RuntimeError)";
        try {
          call();
        } catch (const kdist::RuntimeError& e) {
          message = e.what();
        }
        check(message.find("kdist was not started on this process (rank " +
                           std::to_string(world_rank) + " of MPI_COMM_WORLD)") != std::string::npos,
              std::string("half 1: ") + what + ": " + message);
      };
      refused("process_count", [] { (void)kdist::process_count(); });
      refused("process_id", [] { (void)kdist::process_id(); });
      refused("communicator", [] { (void)kdist::communicator(); });
      refused("all_reduce on MPI_COMM_WORLD", [] {
        Kokkos::View<double*, Kokkos::HostSpace> x("x", 1);
        kdist::all_reduce(Kokkos::DefaultHostExecutionSpace(), x, kdist::ReduceOp::sum,
                          MPI_COMM_WORLD);
      });
      refused("DataParallel", [] { (void)kdist::DataParallel(); });
    }
    int all_failures = 0;
    MPI_Allreduce(&failures, &all_failures, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (world_rank == 0 && all_failures == 0) {
      std::printf("kdist only where it was started ok\n");
    }
    MPI_Comm_free(&group);
    MPI_Finalize();
    return all_failures == 0 ? 0 : 1;
  }
  if (mode == "one_fails" || mode == "one_stops") {
    return kdist::run(argc, argv, group, [&](int, char**) -> int {
      if (color == 1 && group_rank == 1) {
        if (mode == "one_stops") std::raise(SIGSTOP);
        throw kdist::ValueError("process 1 of half 1 cannot go on");
      }
      Kokkos::View<double*, Kokkos::HostSpace> x("x", 1);
      kdist::all_reduce(Kokkos::DefaultHostExecutionSpace(), x, kdist::ReduceOp::sum,
                        kdist::communicator());
      MPI_Barrier(MPI_COMM_WORLD);  // half 0 waits for half 1, as a simulation would
      return 0;
    });
  }

  if (mode == "fail") {
    if (color == 1) {
      // An error every process of the half shares; kdist::run ends the job, not just the half.
      return kdist::run(argc, argv, group, [](int, char**) -> int {
        throw kdist::ValueError("half 1 cannot go on (every process of it fails alike)");
      });
    }
    MPI_Barrier(MPI_COMM_WORLD);  // half 0 waits for half 1, as a simulation waits for training
    std::printf("error: half 0 was left to go on\n");
    MPI_Finalize();
    return 1;
  }

  // Kokkos is the program's: the two kdist runs below (on the half, then alone) share it.
  Kokkos::initialize(argc, argv);
  double group_loss = 0;
  {
    kdist::ScopeGuard guard(argc, argv, group);
    const std::string where = "process " + std::to_string(world_rank) + ": ";
    check(kdist::process_count() == group_size, where + "process_count() is not the group's size");
    check(kdist::process_id() == group_rank, where + "process_id() is not the group rank");
    check(kdist::list_devices().size() == std::size_t(group_size),
          where + "list_devices() does not list the group's devices");
    int relation = MPI_UNEQUAL;
    MPI_Comm_compare(kdist::communicator(), group, &relation);
    check(relation == MPI_CONGRUENT,
          where + "kdist::communicator() is not a duplicate of the group's communicator");
    // A second start on the same group is accepted; on other processes it is refused.
    kdist::initialize(group);
    std::string refused = "(no kdist::RuntimeError)";
    try {
      kdist::initialize(MPI_COMM_SELF);
    } catch (const kdist::RuntimeError& e) {
      refused = e.what();
    }
    check(group_size == 1 ||
              refused.find("kdist already runs on a communicator of") != std::string::npos,
          where + "kdist::initialize(MPI_COMM_SELF) inside the group's run: " + refused);
    std::string file;
    if (!dir.empty()) {
      const std::string group_dir = dir + "/group" + std::to_string(color);
      if (group_rank == 0) std::filesystem::create_directories(group_dir);
      MPI_Barrier(group);
      file = group_dir + "/checkpoint.h5";
    }
    group_loss = train(color, file);
  }
  {
    std::string message = "(no kdist::RuntimeError)";
    try {
      (void)kdist::communicator();
    } catch (const kdist::RuntimeError& e) {
      message = e.what();
    }
    check(message.find("kdist was not started on this process") != std::string::npos,
          "kdist::communicator() after the guard: " + message);
  }
  double alone_loss = 0;
  {
    kdist::ScopeGuard guard(argc, argv, MPI_COMM_SELF);
    check(kdist::process_count() == 1, "alone: process_count() is not 1");
    alone_loss = train(color, "");
  }
  check(std::abs(alone_loss - group_loss) <= 1e-5 * std::abs(alone_loss),
        "process " + std::to_string(world_rank) + ": group " + std::to_string(color) + " loss " +
            std::to_string(group_loss) + ", alone " + std::to_string(alone_loss));
  Kokkos::finalize();
  MPI_Comm_free(&group);
  int all_failures = 0;
  MPI_Allreduce(&failures, &all_failures, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (world_rank == 0 && all_failures == 0) {
    std::printf("communicator groups ok (%s): group loss %.6f / %.6f\n", mode.c_str(), group_loss,
                alone_loss);
  }
  MPI_Finalize();
  return all_failures == 0 ? 0 : 1;
}
