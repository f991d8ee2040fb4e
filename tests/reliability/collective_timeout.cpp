// The stuck-collective watchdog (tests/collective_timeout.cmake, docs/reliability.md): the last
// process stops before a collective (sleeps far past the timeout) and the others must end the job
// within the timeout plus a few seconds, naming the collective, the step, the axis and the
// missing process.
//   collective_timeout stuck C [api|outside]  C: all_reduce, all_gather, reduce_scatter,
//                                 broadcast, all_to_all, agree or halo_gather (the neighbours'
//                                 messages of a halo exchange), on mesh axis "data" (a 1-D mesh
//                                 of every process), in step 3 of epoch 1 of "fit" (not inside a
//                                 step with "outside"); with "api" the timeout is 2 s by
//                                 kdist::set_collective_timeout, else KDIST_COLLECTIVE_TIMEOUT.
//   collective_timeout end        the last process stops; the others return from their main at
//                                 once: kdist::run's end waits for it, within the timeout.
//   collective_timeout grid       a (2, 2) mesh: process 3 stops; process 2 waits on axis "model",
//                                 process 1 on axis "data" (where process 3 is rank 1).
//   collective_timeout stream     process 0 trains from a StreamingDataset fed by all others; each
//                                 sends 1 example, the last then stops without close(): process 0
//                                 waits for a batch of every process's 2 examples.
//   collective_timeout train DIR  fit the seeds' model (DataParallel), a checkpoint after every
//                                 epoch; the last process stops after the checkpoint of epoch 2.
//   collective_timeout check DIR  a fresh run: DIR/ckpt.h5 loads, says epoch 2, and holds the
//                                 weights and slots of two epochs of training bit for bit.
#include <mpi.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <kdist/io/checkpoint.hpp>
#include <kdist/nn/model.hpp>
#include <kdist/nn/streaming_dataset.hpp>
#include <kdist/parallel/collective_timeout.hpp>
#include <kdist/parallel/collectives.hpp>
#include <kdist/parallel/halo_exchange.hpp>
#include <kdist/parallel/mesh_communicators.hpp>
#include <kdist/parallel/mpi/agree.hpp>
#include <kdist/parallel/run.hpp>
#include <kdist/parallel/step_scope.hpp>
#include <kdist/strategy/data_parallel.hpp>
#include <kdist/tensor/distribute_tensor.hpp>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/seeds_model.hpp"

namespace {

using View = Kokkos::View<double*, Kokkos::LayoutRight>;

void stop_here() {
  std::fprintf(stderr, "collective_timeout: process %d stops (sleeps 600 s)\n",
               kdist::process_id());
  std::this_thread::sleep_for(std::chrono::seconds(600));
}

void collective(const std::string& c, const kdist::mpi::Communicator& comm) {
  const auto space = Kokkos::DefaultExecutionSpace();
  const auto n = static_cast<std::size_t>(comm.size());
  if (c == "all_reduce") {
    View v("v", 4);
    kdist::all_reduce(space, v, kdist::ReduceOp::sum, comm);
  } else if (c == "all_gather") {
    View s("s", 2), r("r", 2 * n);
    kdist::all_gather(space, s, r, comm);
  } else if (c == "reduce_scatter") {
    View s("s", 2 * n), r("r", 2);
    kdist::reduce_scatter(space, s, r, kdist::ReduceOp::sum, comm);
  } else if (c == "broadcast") {
    int x = 1;  // from the stopped process: a root need not wait for the others
    kdist::broadcast(x, comm.size() - 1, comm);
  } else if (c == "all_to_all") {
    View s("s", 2 * n), r("r", 2 * n);
    kdist::all_to_all(space, s, r, comm);
  } else if (c == "agree") {
    kdist::mpi::agree(comm, true, "");
  } else if (c == "halo_gather") {  // each process reads one position of each neighbour
    std::vector<kdist::HaloRange> wanted;
    for (std::size_t q = 0; q < n; ++q) {
      wanted.push_back(
          {static_cast<std::int64_t>(2 * q) - 1, static_cast<std::int64_t>(2 * q) + 3});
    }
    const kdist::HaloPlan plan(2 * n, n, static_cast<std::size_t>(comm.rank()), wanted,
                               kdist::Boundary::zeros);
    View block("block", 2), extended("extended", 4);
    kdist::halo_gather(space, plan, 0, block, extended, comm);
  } else {
    throw kdist::ValueError("unknown collective " + c);
  }
}

int stuck(const std::string& c, const std::string& how) {
  if (how == "api") kdist::set_collective_timeout(std::chrono::seconds(2));
  const int n = kdist::process_count();
  kdist::MeshCommunicators mesh({n}, {"data"});
  if (kdist::process_id() + 1 == n) stop_here();
  if (how == "outside") {
    collective(c, mesh.comm("data"));
  } else {
    const kdist::StepScope step("fit", 0, 2);
    collective(c, mesh.comm("data"));
  }
  std::printf("process %d: the collective completed\n", kdist::process_id());
  return 0;
}

int stream() {
  const int n = kdist::process_count();
  const int me = kdist::process_id();
  if (me > 0) {
    kdist::StreamProducer<float> out(kdist::communicator(), 0, {2}, 1);
    out.send(std::vector<float>{1, 2}, std::vector<float>{3});
    if (me + 1 == n) stop_here();
    out.send(std::vector<float>{1, 2}, std::vector<float>{3});
    out.close();
    return 0;
  }
  std::vector<int> producers;
  for (int p = 1; p < n; ++p) producers.push_back(p);
  kdist::StreamingDataset<float> data(kdist::communicator(), producers, {2}, 1, {.capacity = 8});
  const auto batch = static_cast<std::size_t>(2 * (n - 1));
  Kokkos::View<float**, Kokkos::LayoutRight, Kokkos::HostSpace> x("x", batch, 2), y("y", batch, 1);
  data.next_batch(x, y);
  std::printf("process 0: a batch came\n");
  return 0;
}

int grid() {
  kdist::MeshCommunicators mesh({2, 2}, {"data", "model"});
  const int p = kdist::process_id();
  if (p == 3) stop_here();
  const kdist::StepScope step("evaluate", 0, 0);
  collective("all_reduce", mesh.comm("model"));  // 0-1 complete; 2 waits for 3
  collective("all_reduce", mesh.comm("data"));   // 1 waits for 3; 0 for 2
  return 0;
}

// A full tensor as process 0 gathers it, on every process.
template <class Tensor>
std::vector<float> full_from_zero(const Tensor& t) {
  auto full = kdist::full_tensor(t, 0);
  std::vector<float> out(t.global_size());
  if (kdist::process_id() == 0) out.assign(full.data(), full.data() + full.size());
  MPI_Bcast(out.data(), static_cast<int>(out.size()), MPI_FLOAT, 0, MPI_COMM_WORLD);
  return out;
}
std::map<std::string, std::vector<float>> state_of(kdist::Sequential& m) {
  std::map<std::string, std::vector<float>> out;
  m.for_each_variable_with_slots([&](auto& v, auto& slots) {
    out[v.path] = full_from_zero(v.value);
    for (std::size_t k = 0; k < 2; ++k) {
      out[v.path + "/slot" + std::to_string(k)] = full_from_zero(slots.at(k));
    }
  });
  return out;
}
kdist::Sequential compiled_model() {
  auto m = kdist::examples::seeds_model();
  m.compile(std::make_shared<kdist::DataParallel>(), kdist::Loss::mean_squared_error, kdist::Adam(),
            7);
  return m;
}

int train(const std::string& dir) {
  if (kdist::process_id() == 0) {
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  const auto data = kdist::examples::seeds_data();
  auto m = compiled_model();
  m.fit(data, {.batch_size = 16,
               .epochs = 50,
               .verbose = 0,
               .on_epoch_end = [&](std::size_t done, const kdist::Metrics& metrics) {
                 kdist::save_checkpoint(m, dir + "/ckpt.h5", {.epoch = done, .loss = metrics.loss});
                 if (kdist::process_id() == 0) {
                   std::printf("checkpoint of epoch %zu saved\n", done);
                   std::fflush(stdout);
                 }
                 if (done == 2 && kdist::process_id() + 1 == kdist::process_count()) stop_here();
               }});
  std::printf("process %d: training ended without a timeout\n", kdist::process_id());
  return 1;
}

int check(const std::string& dir) {
  const auto data = kdist::examples::seeds_data();
  auto reference = compiled_model();
  reference.fit(data, {.batch_size = 16, .epochs = 2, .verbose = 0, .on_epoch_end = {}});
  const auto want = state_of(reference);
  auto loaded = compiled_model();
  const auto info = kdist::load_checkpoint(loaded, dir + "/ckpt.h5");
  int bad = 0;
  if (info.epoch != 2 || loaded.iterations() != reference.iterations()) {
    std::printf("process %d: the checkpoint says epoch %zu, step %lld; want epoch 2, step %lld\n",
                kdist::process_id(), info.epoch, static_cast<long long>(loaded.iterations()),
                static_cast<long long>(reference.iterations()));
    ++bad;
  }
  const auto got = state_of(loaded);
  for (const auto& [k, w] : want) {
    if (std::memcmp(got.at(k).data(), w.data(), w.size() * sizeof(float)) != 0) {
      std::printf("process %d: %s differs from two epochs of training\n", kdist::process_id(),
                  k.c_str());
      ++bad;
    }
  }
  int any = 0;
  MPI_Allreduce(&bad, &any, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (kdist::process_id() == 0 && any == 0) {
    std::printf("the last checkpoint loads: epoch 2, its weights, slots and step\n");
  }
  return any ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  return kdist::run(argc, argv, [](int argc_, char** argv_) {
    const std::string mode = argc_ > 1 ? argv_[1] : "";
    const std::string arg = argc_ > 2 ? argv_[2] : "";
    const std::string how = argc_ > 3 ? argv_[3] : "";
    if (mode == "stuck") return stuck(arg, how);
    if (mode == "end") {
      if (kdist::process_id() + 1 == kdist::process_count()) stop_here();
      std::printf("process %d: returns\n", kdist::process_id());
      return 0;
    }
    if (mode == "grid") return grid();
    if (mode == "stream") return stream();
    if (mode == "train") return train(arg);
    if (mode == "check") return check(arg);
    throw kdist::ValueError(
        "usage: collective_timeout stuck C [api|outside] | end | grid | stream | train DIR | "
        "check DIR");
  });
}
