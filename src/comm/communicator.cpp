// The backend-independent parts of the comm layer: CommRequest, the Communicator base (names,
// argument checks), sharding helpers, options, the failure flag and the timeout errors.
#include "tierzero/comm/communicator.hpp"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>

#include "comm_internal.hpp"
#include "tierzero/core/error.hpp"
#include "tierzero/core/log.hpp"
#include "tierzero/core/timer.hpp"

namespace tierzero::comm {

namespace {
std::atomic<bool> g_comm_failed{false};

std::string format_seconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g s", s);
  return buf;
}
}  // namespace

const char* reduce_op_name(ReduceOp op) {
  return op == ReduceOp::sum ? "sum" : "avg";
}

CommOptions CommOptions::from_env() {
  CommOptions o;
  if (const char* env = std::getenv("TIERZERO_COMM_TIMEOUT_S"); env != nullptr && *env != '\0') {
    char* end = nullptr;
    const double v = std::strtod(env, &end);
    TZ_CHECK(end != env && *end == '\0' && v > 0.0,
             std::string("TIERZERO_COMM_TIMEOUT_S=") + env + " is not a positive number of seconds",
             "set it to e.g. 300, or unset it for the default");
    o.timeout_s = v;
  }
  return o;
}

size_t shard_count(size_t total, int ranks) {
  TZ_CHECK(ranks > 0, "shard_count needs a positive rank count", "a TierZero bug: report it");
  const auto n = static_cast<size_t>(ranks);
  return (total + n - 1) / n;
}

size_t padded_count(size_t total, int ranks) {
  return shard_count(total, ranks) * static_cast<size_t>(ranks);
}

size_t owned_count(size_t total, int ranks, int rank) {
  const size_t shard = shard_count(total, ranks);
  const size_t begin = shard * static_cast<size_t>(rank);
  if (begin >= total) return 0;
  return total - begin < shard ? total - begin : shard;
}

bool comm_failed() {
  return g_comm_failed.load(std::memory_order_acquire);
}

namespace comm_detail {

void mark_failed() {
  g_comm_failed.store(true, std::memory_order_release);
}

std::string describe_op(const char* op, size_t count, DType dtype, const std::string& group,
                        const char* extra) {
  std::string s = std::string(op) + " of " + std::to_string(count) + " x " + dtype_name(dtype);
  if (extra != nullptr) s += std::string(" ") + extra;
  return s + " on " + group;
}

void throw_timeout(const std::string& what, double timeout_s) {
  mark_failed();
  TZ_THROW(what + " did not complete within " + format_seconds(timeout_s) +
               "; a peer rank died or stalled",
           "look for the first error in the other ranks' output; if a step legitimately takes "
           "longer, raise TIERZERO_COMM_TIMEOUT_S");
}

void throw_ready_timeout(const std::string& what, double timeout_s) {
  mark_failed();
  TZ_THROW(what + " did not start within " + format_seconds(timeout_s) +
               ": its ready event did not complete",
           "the work recorded before that event (a copy, a kernel, a host task) is stuck, or the "
           "event was recorded on a stream whose work never runs; if that work legitimately takes "
           "longer, raise TIERZERO_COMM_TIMEOUT_S");
}

void throw_after_failure(const std::string& what) {
  TZ_THROW(what + " abandoned: an earlier communication in this process failed",
           "the first error above names the operation and group that failed");
}

}  // namespace comm_detail

CommRequest& CommRequest::operator=(CommRequest&& other) noexcept {
  if (this != &other) {
    finish_quietly();
    op_ = std::move(other.op_);
    completed_s_ = other.completed_s_;
  }
  return *this;
}

CommRequest::~CommRequest() {
  finish_quietly();
}

void CommRequest::finish_quietly() noexcept {
  if (!op_) return;
  try {
    op_->wait();
  } catch (const std::exception& e) {
    // A request dropped without wait(): the error must not vanish, but a destructor cannot throw.
    log::error(std::string("a communication request was dropped unfinished: ") + e.what());
  }
  op_.reset();
}

void CommRequest::note_completion(const comm_detail::PendingOp& op) {
  const double stamp = op.completed_s();
  completed_s_ = stamp >= 0.0 ? stamp : monotonic_seconds();
}

void CommRequest::wait() {
  if (!op_) return;
  std::shared_ptr<comm_detail::PendingOp> op = std::move(op_);
  op->wait();
  note_completion(*op);
}

bool CommRequest::test() {
  if (!op_) return true;
  if (!op_->test()) return false;
  note_completion(*op_);
  op_.reset();
  return true;
}

void wait_all(std::vector<CommRequest>& requests) {
  std::exception_ptr first;
  for (auto& r : requests) {
    try {
      r.wait();
    } catch (...) {
      if (!first) first = std::current_exception();
    }
  }
  if (first) std::rethrow_exception(first);
}

std::string format_ranks(const std::vector<int>& ranks) {
  if (ranks.empty()) return "none";
  bool contiguous = true;
  for (size_t i = 1; i < ranks.size(); ++i) contiguous = contiguous && ranks[i] == ranks[i - 1] + 1;
  if (contiguous && ranks.size() > 1)
    return std::to_string(ranks.front()) + "-" + std::to_string(ranks.back());
  std::string s;
  for (size_t i = 0; i < ranks.size(); ++i) s += (i ? "," : "") + std::to_string(ranks[i]);
  return s;
}

Communicator::Communicator(std::string name, int rank, std::vector<int> world_ranks,
                           CommOptions options)
    : name_(std::move(name)),
      rank_(rank),
      world_ranks_(std::move(world_ranks)),
      options_(options) {}

std::string Communicator::describe() const {
  return "group " + name_ + " (ranks " + format_ranks(world_ranks_) + ")";
}

void Communicator::check_peer(const char* op, int peer) const {
  TZ_CHECK(peer >= 0 && peer < size(),
           std::string(op) + " on " + describe() + ": rank " + std::to_string(peer) +
               " is not in the group (size " + std::to_string(size()) + ")",
           "peers and roots are ranks within the group, 0..size()-1, not world ranks");
}

void Communicator::check_buffers(const char* op, const void* a, const void* b, size_t count) const {
  TZ_CHECK(count == 0 || (a != nullptr && b != nullptr),
           std::string(op) + " on " + describe() + ": a null buffer with " + std::to_string(count) +
               " elements",
           "pass the buffers the operation reads and writes");
}

}  // namespace tierzero::comm
