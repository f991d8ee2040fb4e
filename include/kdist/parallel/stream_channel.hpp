#pragma once
//! \file parallel/stream_channel.hpp
//! A stream of training examples from simulation processes (producers) to a training process, by
//! non-blocking point-to-point messages (in the manner of Melissa's in-transit training):
//! - `kdist::StreamProducer<T>` (on a simulation process): `send(x, target)` packs one example (a
//!   snapshot of the example shape, and its target row or integer label) into a message and starts
//!   it with MPI_Isend, so the simulation goes on at once; at most `max_in_flight` messages are in
//!   flight, and when the bound is reached the oldest is completed before the new one goes.
//!   `close()` sends the end of the stream and completes what is in flight.
//! - `kdist::StreamReceiver<T>` (on a training process; kdist::StreamingDataset, nn/, owns one):
//!   `drain(f)` receives every message that has arrived (MPI_Improbe / MPI_Mrecv, no thread) and
//!   calls f for each example; `wait(f, ...)` blocks until one more message arrives.
//!
//! Every message carries a header (the example shape, the target width or "label", the scalar
//! type, a sequence number), so a trainer that expects another shape or type says so (a
//! kdist::ValueError naming the producer and both shapes) instead of reading garbage. A producer
//! may send to one trainer; a trainer hears from any number of producers (many-to-one, one-to-one,
//! several producer groups), each a rank of the communicator given to both ends (e.g.
//! MPI_COMM_WORLD when the simulation and training groups are MPI_Comm_split of it). Streams that
//! share a communicator and a trainer use distinct tags.
//!
//! No wait without a deadline: a trainer waiting for examples, or a producer waiting for its
//! trainer to take its oldest message, ends the job after the collective timeout
//! (kdist::set_collective_timeout, KDIST_COLLECTIVE_TIMEOUT) with a message naming the processes
//! it was waiting for (a producer that stopped without close(), a trainer that stopped draining).
//!
//! \code
//! // simulation process: examples of (64, 64) values with 4096 target values, to process 3
//! kdist::StreamProducer<float> out(MPI_COMM_WORLD, 3, {64, 64}, 4096);
//! out.send(u, u_next);  // returns at once: the simulation goes on
//! out.close();
//! \endcode

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <deque>
#include <span>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include <kdist/core/error.hpp>
#include <kdist/parallel/collective_timeout.hpp>
#include <kdist/parallel/detail/failure.hpp>
#include <kdist/parallel/detail/watchdog.hpp>
#include <kdist/parallel/mpi/communicator.hpp>

namespace kdist {

//! The tag of a stream's messages unless the producer and the trainer give another.
inline constexpr int default_stream_tag = 0x5eed;

//! What one example of a stream is: its shape (the snapshot, without a batch dimension) and its
//! target, `target_width` values or, with `target_width` 0, one integer label (class id).
struct StreamFormat {
  std::vector<std::size_t> example_shape;
  std::size_t target_width = 0;

  //! Values per example: the product of example_shape.
  [[nodiscard]] std::size_t example_size() const {
    std::size_t n = 1;
    for (std::size_t e : example_shape) n *= e;
    return n;
  }
  //! "(64, 64) examples with 4096 target values" or "(784) examples with integer labels".
  [[nodiscard]] std::string describe() const {
    std::string s = "(";
    for (std::size_t i = 0; i < example_shape.size(); ++i) {
      s += (i ? ", " : "") + std::to_string(example_shape[i]);
    }
    s += ") examples with ";
    return s + (target_width ? std::to_string(target_width) + " target values" : "integer labels");
  }
  friend bool operator==(const StreamFormat&, const StreamFormat&) = default;
};

namespace detail::stream {

inline constexpr std::int64_t magic = 0x6b64737472656dLL;  // "kdstrem"
inline constexpr std::int64_t kind_example = 1;
inline constexpr std::int64_t kind_end = 2;
inline constexpr std::size_t max_rank = 8;
//! Header words: magic, kind, scalar type, target width, label, sequence number, rank, 8 extents.
inline constexpr std::size_t header_words = 7 + max_rank;
inline constexpr std::size_t header_bytes = header_words * sizeof(std::int64_t);

//! The scalar type in a header: its size, and whether it is floating point.
template <class T>
constexpr std::int64_t type_code() {
  return static_cast<std::int64_t>(sizeof(T)) * 2 + (std::is_floating_point_v<T> ? 1 : 0);
}
inline std::string type_name(std::int64_t code) {
  return std::string(code % 2 ? "floating-point" : "integer") + " values of " +
         std::to_string(code / 2) + " bytes";
}

//! Throws kdist::ValueError when `f` cannot be streamed.
inline void check_format(const char* who, const StreamFormat& f) {
  const auto& s = f.example_shape;
  if (s.empty() || s.size() > max_rank ||
      std::any_of(s.begin(), s.end(), [](std::size_t e) { return e == 0; })) {
    throw ValueError(std::string(who) + ": the example shape is " + f.describe() +
                     "; give 1 to 8 extents, none of them 0");
  }
}

//! The bytes of one message of `format` (header, example, target row).
template <class T>
std::size_t message_bytes(const StreamFormat& format) {
  return header_bytes + (format.example_size() + format.target_width) * sizeof(T);
}

inline std::int64_t word(const std::byte* message, std::size_t i) {
  std::int64_t w = 0;
  std::memcpy(&w, message + i * sizeof(std::int64_t), sizeof w);
  return w;
}

inline void check_tag(const char* who, MPI_Comm comm, int tag) {
  void* value = nullptr;
  int found = 0;
  mpi::detail::check_mpi(MPI_Comm_get_attr(comm, MPI_TAG_UB, &value, &found),
                         "kdist stream: MPI_Comm_get_attr(MPI_TAG_UB)");
  const int upper = found ? *static_cast<int*>(value) : 32767;
  if (tag < 0 || tag > upper) {
    throw ValueError(std::string(who) + ": tag " + std::to_string(tag) + " is not from 0 to " +
                     std::to_string(upper) + " (MPI_TAG_UB); give the same valid tag to both ends");
  }
}

inline std::pair<int, int> rank_and_size(const char* who, MPI_Comm comm) {
  if (comm == MPI_COMM_NULL) {
    throw ValueError(std::string(who) +
                     ": the communicator is MPI_COMM_NULL; give the one both "
                     "ends of the stream are ranks of (e.g. MPI_COMM_WORLD)");
  }
  int rank = 0;
  int size = 0;
  mpi::detail::check_mpi(MPI_Comm_rank(comm, &rank), "kdist stream: MPI_Comm_rank");
  mpi::detail::check_mpi(MPI_Comm_size(comm, &size), "kdist stream: MPI_Comm_size");
  return {rank, size};
}

inline std::string rank_list(const std::vector<int>& ranks) {
  std::string out;
  for (std::size_t i = 0; i < ranks.size(); ++i) {
    out += (i == 0 ? "" : (i + 1 == ranks.size() ? " and " : ", ")) + std::to_string(ranks[i]);
  }
  return out;
}

}  // namespace detail::stream

//! The producer's end of a stream: examples of one format, to one trainer (rank `trainer` of
//! `comm`). Move-only; the destructor completes what is in flight (under the timeout) but does not
//! close the stream: call close() when the simulation ends.
template <class T>
class StreamProducer {
  static_assert(std::is_trivially_copyable_v<T>,
                "kdist::StreamProducer<T>: T is sent as bytes; give a trivially copyable scalar");

 public:
  struct Options {
    //! Messages in flight at most; when reached, send() first completes the oldest.
    std::size_t max_in_flight = 4;
    //! The messages' tag (the trainer's StreamingDataset gives the same).
    int tag = default_stream_tag;
  };

  //! Errors: kdist::ValueError for MPI_COMM_NULL, a trainer that is not a rank of `comm` or is
  //! this process, a bad example shape (none, more than 8 extents, a 0 extent), max_in_flight 0
  //! or a tag MPI does not allow.
  StreamProducer(MPI_Comm comm, int trainer, std::vector<std::size_t> example_shape,
                 std::size_t target_width, Options options = {})
      : comm_(comm),
        trainer_(trainer),
        format_{std::move(example_shape), target_width},
        options_(options) {
    constexpr const char* who = "kdist::StreamProducer";
    const auto [rank, size] = detail::stream::rank_and_size(who, comm);
    if (trainer < 0 || trainer >= size) {
      throw ValueError(std::string(who) + ": trainer " + std::to_string(trainer) +
                       " is not a rank of the communicator (0 to " + std::to_string(size - 1) +
                       "); give the rank of the training process this producer feeds");
    }
    if (trainer == rank) {
      throw ValueError(std::string(who) + ": trainer " + std::to_string(trainer) +
                       " is this process; a process is a producer or a trainer, not both: give "
                       "the rank of another process (e.g. one of the other MPI_Comm_split group)");
    }
    detail::stream::check_format(who, format_);
    if (options_.max_in_flight == 0) {
      throw ValueError(std::string(who) + ": max_in_flight is 0; give at least 1 message");
    }
    detail::stream::check_tag(who, comm, options_.tag);
    bytes_ = detail::stream::message_bytes<T>(format_);
    if (bytes_ > static_cast<std::size_t>(INT_MAX)) {
      throw ValueError(std::string(who) + ": one message of " + format_.describe() + " is " +
                       std::to_string(bytes_) +
                       " bytes, over MPI's 2^31 - 1; send smaller examples");
    }
  }

  StreamProducer(const StreamProducer&) = delete;
  StreamProducer& operator=(const StreamProducer&) = delete;
  StreamProducer(StreamProducer&& other) noexcept
      : comm_(other.comm_),
        trainer_(other.trainer_),
        format_(std::move(other.format_)),
        options_(other.options_),
        bytes_(other.bytes_),
        sequence_(other.sequence_),
        closed_(other.closed_),
        flights_(std::exchange(other.flights_, {})),
        spare_(std::move(other.spare_)) {}
  StreamProducer& operator=(StreamProducer&&) = delete;
  ~StreamProducer() { complete_all(); }

  //! One example (`x`: example_size() values, row-major) and its row of target_width values.
  //! Returns once the message is started. Errors: kdist::ValueError for sizes that do not match
  //! the format, a producer of labels, or one already closed; kdist::RuntimeError when MPI fails.
  void send(std::span<const T> x, std::span<const T> target) {
    check_open("send");
    if (format_.target_width == 0) {
      throw ValueError(
          "kdist::StreamProducer::send: this stream carries integer labels; call "
          "send(x, label)");
    }
    if (target.size() != format_.target_width) {
      throw ValueError("kdist::StreamProducer::send: the target has " +
                       std::to_string(target.size()) + " values; the stream's " +
                       format_.describe() + " has " + std::to_string(format_.target_width));
    }
    post(x, target, 0, detail::stream::kind_example);
  }
  //! One example and its label (a class id, >= 0). Errors: as above, and a negative label.
  void send(std::span<const T> x, std::int32_t label) {
    check_open("send");
    if (format_.target_width != 0) {
      throw ValueError("kdist::StreamProducer::send: this stream carries " +
                       std::to_string(format_.target_width) +
                       " target values per example; call send(x, target)");
    }
    if (label < 0) {
      throw ValueError("kdist::StreamProducer::send: label " + std::to_string(label) +
                       " is negative; labels are class ids 0, 1, ...");
    }
    post(x, {}, label, detail::stream::kind_example);
  }

  //! Ends the stream: the end message goes, and every message in flight is completed (the
  //! trainer takes them when it next asks for a batch). Errors: kdist::ValueError when closed.
  void close() {
    check_open("close");
    post({}, {}, 0, detail::stream::kind_end);
    closed_ = true;
    complete_all();
  }

  //! Completes every message in flight: waits until the trainer has taken them (under the
  //! collective timeout, as a full send() does). Errors: kdist::RuntimeError when MPI fails.
  void flush() {
    while (!flights_.empty()) complete_oldest();
  }

  [[nodiscard]] bool closed() const noexcept { return closed_; }
  //! Examples sent so far.
  [[nodiscard]] std::size_t sent() const noexcept { return static_cast<std::size_t>(sequence_); }
  //! Messages started and not known to be complete.
  [[nodiscard]] std::size_t in_flight() const noexcept { return flights_.size(); }
  [[nodiscard]] const StreamFormat& format() const noexcept { return format_; }
  [[nodiscard]] int trainer() const noexcept { return trainer_; }

 private:
  struct Flight {
    MPI_Request request = MPI_REQUEST_NULL;
    std::vector<std::byte> buffer;
  };

  void check_open(const char* what) const {
    if (closed_) {
      throw ValueError(std::string("kdist::StreamProducer::") + what +
                       ": the stream is closed; close() ends it once, after the last send");
    }
  }

  void post(std::span<const T> x, std::span<const T> target, std::int32_t label,
            std::int64_t kind) {
    const bool example = kind == detail::stream::kind_example;
    if (example && x.size() != format_.example_size()) {
      throw ValueError("kdist::StreamProducer::send: the example has " + std::to_string(x.size()) +
                       " values; the stream's " + format_.describe() + " have " +
                       std::to_string(format_.example_size()));
    }
    retire_completed();
    if (flights_.size() >= options_.max_in_flight) complete_oldest();
    std::vector<std::byte> buffer;
    if (!spare_.empty()) {
      buffer = std::move(spare_.back());
      spare_.pop_back();
    }
    const std::size_t bytes = example ? bytes_ : detail::stream::header_bytes;
    buffer.resize(bytes);
    std::int64_t header[detail::stream::header_words] = {};
    header[0] = detail::stream::magic;
    header[1] = kind;
    header[2] = detail::stream::type_code<T>();
    header[3] = static_cast<std::int64_t>(format_.target_width);
    header[4] = label;
    header[5] = sequence_;
    header[6] = static_cast<std::int64_t>(format_.example_shape.size());
    for (std::size_t i = 0; i < format_.example_shape.size(); ++i) {
      header[7 + i] = static_cast<std::int64_t>(format_.example_shape[i]);
    }
    std::memcpy(buffer.data(), header, detail::stream::header_bytes);
    if (example) {
      std::memcpy(buffer.data() + detail::stream::header_bytes, x.data(), x.size() * sizeof(T));
      if (!target.empty()) {
        std::memcpy(buffer.data() + detail::stream::header_bytes + x.size() * sizeof(T),
                    target.data(), target.size() * sizeof(T));
      }
      ++sequence_;
    }
    Flight f{MPI_REQUEST_NULL, std::move(buffer)};
    mpi::detail::check_mpi(MPI_Isend(f.buffer.data(), static_cast<int>(f.buffer.size()), MPI_BYTE,
                                     trainer_, options_.tag, comm_, &f.request),
                           "kdist::StreamProducer: MPI_Isend");
    flights_.push_back(std::move(f));
  }

  //! Drops the messages at the front that have completed (their buffers kept for reuse).
  void retire_completed() {
    while (!flights_.empty()) {
      int done = 0;
      mpi::detail::check_mpi(MPI_Test(&flights_.front().request, &done, MPI_STATUS_IGNORE),
                             "kdist::StreamProducer: MPI_Test");
      if (!done) return;
      retire_front();
    }
  }
  void retire_front() {
    spare_.push_back(std::move(flights_.front().buffer));
    flights_.pop_front();
  }

  //! Completes the oldest message, ending the job past the timeout (the trainer is not draining).
  void complete_oldest() {
    MPI_Request& r = flights_.front().request;
    const std::int64_t timeout = detail::watchdog::timeout_ns();
    if (timeout == 0) {
      mpi::detail::check_mpi(MPI_Wait(&r, MPI_STATUS_IGNORE), "kdist::StreamProducer: MPI_Wait");
    } else {
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::nanoseconds(timeout);
      for (unsigned i = 1;; ++i) {
        int done = 0;
        mpi::detail::check_mpi(MPI_Test(&r, &done, MPI_STATUS_IGNORE),
                               "kdist::StreamProducer: MPI_Test");
        if (done) break;
        if ((i & 255U) == 0) {
          if (std::chrono::steady_clock::now() >= deadline) [[unlikely]] {
            detail::failure::abort_job(
                "kdist::StreamProducer on " + detail::watchdog::describe(comm_) +
                ": trainer process " + std::to_string(trainer_) +
                " did not take this producer's message within " +
                detail::watchdog::seconds_text(timeout) + " (" + std::to_string(flights_.size()) +
                " messages in flight): the trainer stopped, or does not ask for batches. The "
                "timeout is KDIST_COLLECTIVE_TIMEOUT (seconds; 0 or off: no timeout) or "
                "kdist::set_collective_timeout");
          }
          std::this_thread::yield();
        }
      }
    }
    retire_front();
  }

  void complete_all() noexcept {
    try {
      while (!flights_.empty()) complete_oldest();
    } catch (...) {
      flights_.clear();  // MPI failed: nothing left to wait for
    }
  }

  MPI_Comm comm_;
  int trainer_;
  StreamFormat format_;
  Options options_;
  std::size_t bytes_ = 0;
  std::int64_t sequence_ = 0;
  bool closed_ = false;
  std::deque<Flight> flights_;
  std::vector<std::vector<std::byte>> spare_;  // buffers of completed messages, for reuse
};

//! The trainer's end of a stream: examples of one format from the producers `producers` (ranks of
//! `comm`, none of them this process). Not copyable.
template <class T>
class StreamReceiver {
 public:
  //! Errors: kdist::ValueError for MPI_COMM_NULL, no producers, a producer that is not a rank of
  //! `comm`, is this process or is listed twice, a bad format or tag.
  StreamReceiver(MPI_Comm comm, std::vector<int> producers, StreamFormat format,
                 int tag = default_stream_tag, const char* who = "kdist::StreamReceiver")
      : comm_(comm), producers_(std::move(producers)), format_(std::move(format)), tag_(tag) {
    const auto [rank, size] = detail::stream::rank_and_size(who, comm);
    if (producers_.empty()) {
      throw ValueError(std::string(who) +
                       ": no producers; give the ranks of the processes that "
                       "send to this trainer");
    }
    std::vector<int> sorted = producers_;
    std::sort(sorted.begin(), sorted.end());
    for (std::size_t i = 0; i < sorted.size(); ++i) {
      const int p = sorted[i];
      if (p < 0 || p >= size) {
        throw ValueError(std::string(who) + ": producer " + std::to_string(p) +
                         " is not a rank of the communicator (0 to " + std::to_string(size - 1) +
                         ")");
      }
      if (p == rank) {
        throw ValueError(std::string(who) + ": producer " + std::to_string(p) +
                         " is this process, the trainer; a process is a producer or a trainer, "
                         "not both: list the ranks of the other processes that send to it");
      }
      if (i > 0 && sorted[i - 1] == p) {
        throw ValueError(std::string(who) + ": producer " + std::to_string(p) +
                         " is listed twice; list each producer once");
      }
    }
    detail::stream::check_format(who, format_);
    detail::stream::check_tag(who, comm, tag);
    open_.assign(static_cast<std::size_t>(size), 0);
    next_sequence_.assign(static_cast<std::size_t>(size), 0);
    for (int p : producers_) open_[static_cast<std::size_t>(p)] = 1;
    open_count_ = producers_.size();
    buffer_.resize(detail::stream::message_bytes<T>(format_));
  }
  StreamReceiver(const StreamReceiver&) = delete;
  StreamReceiver& operator=(const StreamReceiver&) = delete;
  StreamReceiver(StreamReceiver&&) noexcept = default;
  StreamReceiver& operator=(StreamReceiver&&) noexcept = default;

  //! Receives every message that has arrived, without waiting; calls
  //! `f(producer, x, target, label)` for each example (`x`: example_size() values, `target`:
  //! target_width values, empty for labels; the pointers are valid during the call). Returns the
  //! messages received (examples and ends). Errors: kdist::ValueError for a message from a process
  //! that is not a producer, of another format, type or size, or after its producer's end.
  template <class F>
  std::size_t drain(F&& f) {
    std::size_t n = 0;
    while (receive_one(f)) ++n;
    return n;
  }

  //! Waits until at least one message arrives (and takes it and those behind it, as drain), or
  //! every producer has closed. Past the collective timeout with no message, ends the job naming
  //! the producers still open and `why` (what the trainer was waiting for).
  template <class F>
  std::size_t wait(F&& f, const std::string& why) {
    if (open_count_ == 0) return drain(f);
    const std::int64_t timeout = detail::watchdog::timeout_ns();
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::nanoseconds(timeout);
    for (unsigned i = 1;; ++i) {
      if (const std::size_t n = drain(f); n > 0) return n;
      if ((i & 255U) == 0) {
        if (timeout != 0 && std::chrono::steady_clock::now() >= deadline) [[unlikely]] {
          on_timeout(timeout, why);
        }
        std::this_thread::yield();
      }
    }
  }

  //! Producers that have not sent their end yet, in the order given.
  [[nodiscard]] std::vector<int> open_producers() const {
    std::vector<int> out;
    for (int p : producers_) {
      if (open_[static_cast<std::size_t>(p)]) out.push_back(p);
    }
    return out;
  }
  [[nodiscard]] bool all_closed() const noexcept { return open_count_ == 0; }
  [[nodiscard]] const std::vector<int>& producers() const noexcept { return producers_; }
  [[nodiscard]] const StreamFormat& format() const noexcept { return format_; }
  //! Examples received so far.
  [[nodiscard]] std::size_t received() const noexcept { return received_; }

 private:
  template <class F>
  bool receive_one(F& f) {
    int flag = 0;
    MPI_Message message = MPI_MESSAGE_NULL;
    MPI_Status status;
    mpi::detail::check_mpi(MPI_Improbe(MPI_ANY_SOURCE, tag_, comm_, &flag, &message, &status),
                           "kdist::StreamingDataset: MPI_Improbe");
    if (!flag) return false;
    int count = 0;
    mpi::detail::check_mpi(MPI_Get_count(&status, MPI_BYTE, &count),
                           "kdist::StreamingDataset: MPI_Get_count");
    const int source = status.MPI_SOURCE;
    // Take the message whatever it holds (the sender must not be left waiting), then check it.
    const auto bytes = static_cast<std::size_t>(count);
    if (bytes > buffer_.size()) oversized_.resize(bytes);
    std::byte* data = bytes > buffer_.size() ? oversized_.data() : buffer_.data();
    mpi::detail::check_mpi(MPI_Mrecv(data, count, MPI_BYTE, &message, MPI_STATUS_IGNORE),
                           "kdist::StreamingDataset: MPI_Mrecv");
    const std::string from =
        "a message from process " + std::to_string(source) + " (tag " + std::to_string(tag_) + ")";
    const auto s = static_cast<std::size_t>(source);
    if (std::find(producers_.begin(), producers_.end(), source) == producers_.end()) {
      throw ValueError("kdist::StreamingDataset: " + from +
                       ", which is not one of this trainer's producers (" +
                       detail::stream::rank_list(producers_) +
                       "); list every process that sends to this trainer, or give other streams "
                       "another tag");
    }
    if (bytes < detail::stream::header_bytes ||
        detail::stream::word(data, 0) != detail::stream::magic) {
      throw ValueError("kdist::StreamingDataset: " + from + " of " + std::to_string(bytes) +
                       " bytes is not a kdist stream message; send with kdist::StreamProducer, and "
                       "give other messages to this process another tag");
    }
    if (!open_[s]) {
      throw ValueError("kdist::StreamingDataset: " + from +
                       " came after its producer closed the stream; call close() after the last "
                       "send, once");
    }
    const std::int64_t kind = detail::stream::word(data, 1);
    if (kind == detail::stream::kind_end) {
      open_[s] = 0;
      --open_count_;
      return true;
    }
    const std::int64_t type = detail::stream::word(data, 2);
    if (type != detail::stream::type_code<T>()) {
      throw ValueError("kdist::StreamingDataset: producer " + std::to_string(source) + " sends " +
                       detail::stream::type_name(type) + ", this trainer reads " +
                       detail::stream::type_name(detail::stream::type_code<T>()) +
                       "; give StreamProducer<T> and StreamingDataset<T> the same T");
    }
    StreamFormat sent;
    sent.target_width = static_cast<std::size_t>(detail::stream::word(data, 3));
    const auto rank = static_cast<std::size_t>(detail::stream::word(data, 6));
    if (rank > detail::stream::max_rank) {
      throw ValueError("kdist::StreamingDataset: " + from + " has a header of rank " +
                       std::to_string(rank) + "; it is not a kdist stream message");
    }
    for (std::size_t i = 0; i < rank; ++i) {
      sent.example_shape.push_back(static_cast<std::size_t>(detail::stream::word(data, 7 + i)));
    }
    if (sent != format_) {
      throw ValueError("kdist::StreamingDataset: producer " + std::to_string(source) + " sends " +
                       sent.describe() + "; this trainer expects " + format_.describe() +
                       "; give StreamProducer and StreamingDataset the same example shape and "
                       "target width");
    }
    if (bytes != buffer_.size()) {
      throw ValueError("kdist::StreamingDataset: " + from + " has " + std::to_string(bytes) +
                       " bytes; one example of " + format_.describe() + " takes " +
                       std::to_string(buffer_.size()));
    }
    const std::int64_t sequence = detail::stream::word(data, 5);
    if (sequence != next_sequence_[s]) {
      throw ValueError("kdist::StreamingDataset: " + from + " is example " +
                       std::to_string(sequence) + " of its stream; expected " +
                       std::to_string(next_sequence_[s]) +
                       " (two producers on one rank and tag? give each stream its own tag)");
    }
    ++next_sequence_[s];
    ++received_;
    const auto* x = reinterpret_cast<const T*>(data + detail::stream::header_bytes);
    // The values are copied out by f (memcpy-aligned: the buffer is new-allocated, the header a
    // multiple of 8 bytes).
    f(source, x, std::span<const T>(x + format_.example_size(), format_.target_width),
      static_cast<std::int32_t>(detail::stream::word(data, 4)));
    return true;
  }

  [[noreturn]] void on_timeout(std::int64_t timeout, const std::string& why) const {
    const auto open = open_producers();
    detail::failure::abort_job(
        "kdist::StreamingDataset on " + detail::watchdog::describe(comm_) + " waited " +
        detail::watchdog::seconds_text(timeout) + " " + why +
        ": no message from producer process(es) " + detail::stream::rank_list(open) +
        " of it, which did not close their streams (a producer that stopped, or ended without "
        "close()). The timeout is KDIST_COLLECTIVE_TIMEOUT (seconds; 0 or off: no timeout) or "
        "kdist::set_collective_timeout");
  }

  MPI_Comm comm_;
  std::vector<int> producers_;
  StreamFormat format_;
  int tag_;
  std::vector<char> open_;  // per rank of comm_
  std::vector<std::int64_t> next_sequence_;
  std::size_t open_count_ = 0;
  std::size_t received_ = 0;
  std::vector<std::byte> buffer_, oversized_;
};

}  // namespace kdist
