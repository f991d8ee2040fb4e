// Crash safety of kdist::save_checkpoint (tests/checkpoint.cmake, docs/checkpoints.md):
//   checkpoint_kill save DIR    trains the seeds' model one epoch, saves DIR/ckpt.h5 and prints
//                               "first checkpoint saved", trains one more epoch and saves again.
//                               With KDIST_TEST_KILL_DURING_SAVE=K in the environment, the last
//                               process SIGKILLs itself at its K-th MPI-IO write of that second
//                               save (this program wraps MPI_File_write_at[_all] through MPI's
//                               profiling interface; the library knows nothing of it). The job
//                               must then end, non-zero, without "second checkpoint saved".
//                               KDIST_TEST_STOP_DURING_SAVE=K does the same with SIGSTOP (a hung
//                               host or file system: the process stays, silent); =open stops it
//                               in the save's MPI_File_open, =publish stops process 0 in the
//                               rename that publishes the file. The I/O watchdog must end the job.
//                               KDIST_TEST_STOP_FIRST_SAVE=1: the stop happens in the FIRST save.
//   checkpoint_kill check DIR   a fresh run: DIR/ckpt.h5 loads, on another layout, and holds the
//                               first checkpoint's weights and slots bit for bit (recomputed by
//                               training the same epoch again); the killed save's temporary file
//                               is there, and loading it is an error, not garbage weights.
//   checkpoint_kill check DIR any   the same, without looking at the temporary file (a save
//                               stopped before its file existed, or once it was complete), and
//                               the second checkpoint, bit for bit, is as good when the stopped
//                               process was continued and published it whole
//   checkpoint_kill check_none DIR   the first save was interrupted: no DIR/ckpt.h5 exists.
//   KDIST_TEST_ASYNC_SAVE=1 with save: the second save is a kdist::AsyncCheckpointer's, and a
//                               third epoch trains while it is written (then it is waited for).
//   checkpoint_kill check_second DIR   DIR/ckpt.h5 holds the SECOND checkpoint bit for bit (an
//                               asynchronous save holds the state of its step, not of the epoch
//                               trained while it was written).
//   checkpoint_kill unwaited DIR   an asynchronous save that fails (DIR does not exist), its
//                               checkpointer destroyed without wait(): the job must end.
#include <fcntl.h>
#include <mpi.h>
#include <stdio.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include <kdist/io/async_checkpoint.hpp>
#include <kdist/io/checkpoint.hpp>
#include <kdist/nn/model.hpp>
#include <kdist/parallel/run.hpp>
#include <kdist/strategy/data_parallel.hpp>
#include <kdist/strategy/layout_map.hpp>
#include <kdist/strategy/model_parallel.hpp>
#include <kdist/tensor/distribute_tensor.hpp>

#include "common/seeds_model.hpp"

namespace {

bool armed = false;  // set around the save to interrupt
long writes_left = -1;
bool stop_at_open = false;
bool stop_at_publish = false;
int signal_to_send = SIGKILL;

void interrupt(const char* where) {
  std::fprintf(stderr, "checkpoint_kill: process %d %s itself %s\n", kdist::process_id(),
               signal_to_send == SIGKILL ? "SIGKILLs" : "SIGSTOPs", where);
  std::fflush(stderr);
  std::raise(signal_to_send);
}

void count_write() {
  if (!armed || writes_left < 0) return;
  if (--writes_left == 0) interrupt("in the middle of a save");
}

}  // namespace

// MPI's profiling interface: HDF5's MPI-IO driver writes through these.
extern "C" int MPI_File_write_at_all(MPI_File fh, MPI_Offset offset, const void* buf, int count,
                                     MPI_Datatype datatype, MPI_Status* status) {
  count_write();
  return PMPI_File_write_at_all(fh, offset, buf, count, datatype, status);
}
extern "C" int MPI_File_write_at(MPI_File fh, MPI_Offset offset, const void* buf, int count,
                                 MPI_Datatype datatype, MPI_Status* status) {
  count_write();
  return PMPI_File_write_at(fh, offset, buf, count, datatype, status);
}
extern "C" int MPI_File_open(MPI_Comm comm, const char* filename, int amode, MPI_Info info,
                             MPI_File* fh) {
  if (armed && stop_at_open) interrupt("as the save opens its file");
  return PMPI_File_open(comm, filename, amode, info, fh);
}
// The rename that publishes a save (kdist's publish calls std::rename, which is this one here).
extern "C" int rename(const char* from, const char* to) noexcept {
  if (armed && stop_at_publish) interrupt("as it publishes the save (rename)");
  return renameat(AT_FDCWD, from, AT_FDCWD, to);
}

namespace {

using namespace kdist::layers;
using kdist::examples::seeds_data;
using kdist::examples::seeds_model;

std::shared_ptr<const kdist::Distribution> model_parallel() {
  const auto n = static_cast<std::size_t>(kdist::process_count());
  kdist::RuntimeDeviceMesh mesh({1, n}, {"data", "model"}, kdist::list_devices());
  kdist::LayoutMap map(mesh);
  map["d1/kernel"] = {kdist::replicated, "model"};
  map["d2/output"] = {"data", kdist::replicated};
  return std::make_shared<kdist::ModelParallel>(std::move(map), "data");
}

// The model after its first epoch: what the first checkpoint holds.
kdist::Sequential first_epoch(const kdist::ArrayDataset<float>& data) {
  auto m = seeds_model();
  m.compile(model_parallel(), kdist::Loss::mean_squared_error, kdist::Adam(), 7);
  m.fit(data, {.batch_size = 16, .epochs = 1, .verbose = 0});
  return m;
}

// A full tensor as process 0 gathers it (a replicated block: the replica at coordinate 0, which
// is what a checkpoint holds), on every process.
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

int save(const std::string& dir) {
  if (kdist::process_id() == 0) {
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  const bool last = kdist::process_id() + 1 == kdist::process_count();
  if (const char* k = std::getenv("KDIST_TEST_KILL_DURING_SAVE")) {
    if (last) writes_left = std::atol(k);
  }
  if (const char* k = std::getenv("KDIST_TEST_STOP_DURING_SAVE")) {
    signal_to_send = SIGSTOP;
    const std::string at = k;
    if (at == "open") {
      stop_at_open = last;
    } else if (at == "publish") {
      stop_at_publish = kdist::process_id() == 0;
    } else if (last) {
      writes_left = std::atol(k);
    }
  }
  const char* first_env = std::getenv("KDIST_TEST_STOP_FIRST_SAVE");
  const bool interrupt_first = first_env != nullptr && std::string(first_env) == "1";
  const auto data = seeds_data();
  auto m = first_epoch(data);
  armed = interrupt_first;
  kdist::save_checkpoint(m, dir + "/ckpt.h5", {.epoch = 1});
  armed = false;
  if (kdist::process_id() == 0) std::printf("first checkpoint saved\n");
  std::fflush(stdout);
  m.fit(data, {.batch_size = 16, .epochs = 2, .initial_epoch = 1, .verbose = 0});
  armed = !interrupt_first;
  const char* async_env = std::getenv("KDIST_TEST_ASYNC_SAVE");
  if (async_env != nullptr && std::string(async_env) == "1") {
    kdist::AsyncCheckpointer checkpointer;
    checkpointer.save(m, dir + "/ckpt.h5", {.epoch = 2});
    m.fit(data, {.batch_size = 16, .epochs = 3, .initial_epoch = 2, .verbose = 0});
    checkpointer.wait();
  } else {
    kdist::save_checkpoint(m, dir + "/ckpt.h5", {.epoch = 2});
  }
  armed = false;
  if (kdist::process_id() == 0) {
    std::printf("second checkpoint saved\n");
    if (writes_left > 0) std::printf("the kill never happened: fewer MPI-IO writes than asked\n");
    if (stop_at_open || stop_at_publish) std::printf("the stop never happened\n");
  }
  return writes_left > 0 ? 1 : 0;
}

// A failing asynchronous save that nothing waits for: the checkpointer's destructor ends the job.
int unwaited(const std::string& dir) {
  auto m = first_epoch(seeds_data());
  {
    kdist::AsyncCheckpointer checkpointer;
    checkpointer.save(m, dir + "/no/such/dir/ckpt.h5", {.epoch = 1});
  }
  if (kdist::process_id() == 0) std::printf("the job went on after the failed save\n");
  return 0;
}

// What check expects of DIR/ckpt.h5.
enum class Expect {
  first_and_tmp,    // the first checkpoint, and the interrupted save's temporary file
  first_or_second,  // the first, or the second published whole
  second,           // the second
};

int check(const std::string& dir, Expect expect) {
  const bool require_tmp = expect == Expect::first_and_tmp;
  const auto data = seeds_data();
  auto reference = first_epoch(data);
  auto loaded = seeds_model();
  loaded.compile(std::make_shared<kdist::DataParallel>(), kdist::Loss::mean_squared_error,
                 kdist::Adam(), 7);
  const auto info = kdist::load_checkpoint(loaded, dir + "/ckpt.h5");
  std::size_t epoch = 1;
  if (expect == Expect::second || (expect == Expect::first_or_second && info.epoch == 2)) {
    // The stopped process was continued and published the save it had written whole (Open MPI's
    // launcher sends SIGCONT before it kills): the second checkpoint, whole, never a mixture.
    reference.fit(data, {.batch_size = 16, .epochs = 2, .initial_epoch = 1, .verbose = 0});
    epoch = 2;
  }
  const auto want = state_of(reference);
  int bad = 0;
  if (info.epoch != epoch || loaded.iterations() != reference.iterations()) {
    std::printf(
        "process %d: the checkpoint says epoch %zu, step %lld; the saved one was epoch %zu, "
        "step %lld\n",
        kdist::process_id(), info.epoch, static_cast<long long>(loaded.iterations()), epoch,
        static_cast<long long>(reference.iterations()));
    ++bad;
  }
  const auto got = state_of(loaded);
  for (const auto& [k, w] : want) {
    if (std::memcmp(got.at(k).data(), w.data(), w.size() * sizeof(float)) != 0) {
      std::printf("process %d: %s differs from the epoch %zu checkpoint's\n", kdist::process_id(),
                  k.c_str(), epoch);
      ++bad;
    }
  }
  // The interrupted save left its temporary file, and it does not load.
  std::string tmp;
  if (kdist::process_id() == 0) {
    for (const auto& e : std::filesystem::directory_iterator(dir)) {
      if (e.path().filename().string().rfind("ckpt.h5.tmp-", 0) == 0) tmp = e.path().string();
    }
  }
  kdist::detail::checkpoint::broadcast_string(tmp);
  if (!require_tmp) {
    // stopped before its temporary file existed (in MPI_File_open), or after it was complete (at
    // the publish): only the published checkpoint matters
  } else if (tmp.empty()) {
    if (kdist::process_id() == 0) {
      std::printf("no ckpt.h5.tmp-* in %s: the second save was not interrupted\n", dir.c_str());
    }
    ++bad;
  } else {
    try {
      kdist::load_checkpoint(loaded, tmp);
      std::printf("process %d: the interrupted save's %s loaded\n", kdist::process_id(),
                  tmp.c_str());
      ++bad;
    } catch (const kdist::ValueError& e) {
      if (kdist::process_id() == 0) std::printf("the interrupted save: %s\n", e.what());
    }
  }
  int any = 0;
  MPI_Allreduce(&bad, &any, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (kdist::process_id() == 0 && any == 0) {
    std::printf("checkpoint intact: the %s checkpoint's weights, slots and step\n",
                epoch == 1 ? "first" : "second (published whole)");
  }
  return any ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  return kdist::run(argc, argv, [](int argc_, char** argv_) {
    const std::string mode = argc_ > 2 ? argv_[1] : "";
    if (mode == "save") return save(argv_[2]);
    if (mode == "check") {
      return check(argv_[2], argc_ >= 4 && std::string(argv_[3]) == "any" ? Expect::first_or_second
                                                                          : Expect::first_and_tmp);
    }
    if (mode == "check_second") return check(argv_[2], Expect::second);
    if (mode == "unwaited") return unwaited(argv_[2]);
    if (mode == "check_none") {
      const bool exists = std::filesystem::exists(std::string(argv_[2]) + "/ckpt.h5");
      if (kdist::process_id() == 0) {
        std::printf(exists ? "error: the interrupted first save left ckpt.h5\n"
                           : "no checkpoint published: the interrupted first save left none\n");
      }
      return exists ? 1 : 0;
    }
    throw kdist::ValueError(
        "usage: checkpoint_kill save|check|check_second|check_none|unwaited DIR");
  });
}
