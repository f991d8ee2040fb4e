#pragma once
//! \file ops/detail/cuda_graph.hpp
//! `CudaGraph`: the work one callable enqueues on a CUDA stream, recorded once by stream capture
//! and replayed as one graph launch (cudaStreamBeginCapture / EndCapture / GraphInstantiate /
//! GraphLaunch). kdist records the training step on the stream of the default Kokkos::Cuda
//! instance (Kokkos 4 gives it a stream of its own, which can be captured), where its kernels,
//! its cuBLAS GEMMs and its stream-ordered copies go (kdist::detail::StepGraph).
//!
//! `cuda_graphs_enabled` is false without Kokkos' CUDA backend; the class is then absent.

#include <Kokkos_Core.hpp>

#if defined(KOKKOS_ENABLE_CUDA)
#include <cuda_runtime.h>

#include <exception>
#include <string>
#include <utility>

#include <kdist/core/error.hpp>
#endif

namespace kdist::ops::detail {

#if defined(KOKKOS_ENABLE_CUDA)
inline constexpr bool cuda_graphs_enabled = true;

class CudaGraph {
 public:
  using stream_type = cudaStream_t;
  CudaGraph() = default;
  CudaGraph(const CudaGraph&) = delete;
  CudaGraph& operator=(const CudaGraph&) = delete;
  CudaGraph(CudaGraph&& other) noexcept : exec_(std::exchange(other.exec_, nullptr)) {}
  CudaGraph& operator=(CudaGraph&& other) noexcept {
    if (this != &other) {
      reset();
      exec_ = std::exchange(other.exec_, nullptr);
    }
    return *this;
  }
  ~CudaGraph() { reset(); }

  //! Records what `enqueue()` puts on `stream` (nothing runs: the work is captured, the host code
  //! runs). Returns "" once the graph is ready to launch, else why it is not (the capture was
  //! invalidated - something waited for the device or used another stream - or instantiation
  //! failed); an exception from `enqueue` ends the capture and propagates.
  template <class Enqueue>
  std::string record(cudaStream_t stream, Enqueue&& enqueue) {
    if (std::string why = begin(stream); !why.empty()) return why;
    try {
      enqueue();
    } catch (const std::exception& ex) {
      abandon(stream);
      return std::string("the step failed while it was captured: ") + ex.what();
    }
    return end(stream);
  }
  //! Starts capturing what is enqueued on `stream` into this graph (its last recording dropped):
  //! "" or why not. end() or abandon() ends it.
  std::string begin(cudaStream_t stream) {
    reset();
    const cudaError_t e = cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal);
    if (e != cudaSuccess) return std::string("cudaStreamBeginCapture: ") + cudaGetErrorString(e);
    return {};
  }
  //! Ends the capture begun on `stream`: "" once the graph is ready to launch, else why not.
  std::string end(cudaStream_t stream) {
    cudaGraph_t graph = nullptr;
    cudaError_t e = cudaStreamEndCapture(stream, &graph);
    if (e != cudaSuccess) {
      if (graph != nullptr) (void)cudaGraphDestroy(graph);
      (void)cudaGetLastError();  // the capture's error is not left for the next call
      return std::string("cudaStreamEndCapture: ") + cudaGetErrorString(e);
    }
    e = cudaGraphInstantiate(&exec_, graph, 0);
    (void)cudaGraphDestroy(graph);
    if (e != cudaSuccess) {
      exec_ = nullptr;
      (void)cudaGetLastError();
      return std::string("cudaGraphInstantiate: ") + cudaGetErrorString(e);
    }
    return {};
  }
  //! Ends the capture begun on `stream` and drops what it recorded.
  void abandon(cudaStream_t stream) noexcept {
    cudaGraph_t graph = nullptr;
    (void)cudaStreamEndCapture(stream, &graph);
    if (graph != nullptr) (void)cudaGraphDestroy(graph);
    (void)cudaGetLastError();
  }
  //! Enqueues the recorded work on `stream` (one launch). Errors: kdist::RuntimeError.
  void launch(cudaStream_t stream) const {
    const cudaError_t e = cudaGraphLaunch(exec_, stream);
    if (e != cudaSuccess) {
      throw RuntimeError(std::string("kdist: cudaGraphLaunch of the captured step failed: ") +
                         cudaGetErrorString(e));
    }
  }
  bool ready() const noexcept { return exec_ != nullptr; }
  void reset() noexcept {
    if (exec_ != nullptr) (void)cudaGraphExecDestroy(exec_);
    exec_ = nullptr;
  }

 private:
  cudaGraphExec_t exec_ = nullptr;
};
#else
inline constexpr bool cuda_graphs_enabled = false;
#endif

}  // namespace kdist::ops::detail
