// OffloadAdamW's in-place fast path (in_place_adamw.hpp).
#include "in_place_adamw.hpp"

#include <algorithm>
#include <cstring>

#include "tierzero/core/error.hpp"
#include "tierzero/kernels/cpu_ops.hpp"

namespace tierzero::python {
namespace {

// A tensor without a gradient is updated from zeros in pieces of this many elements, so the zero
// buffer stays small (256 KiB) whatever the tensor's size.
constexpr size_t kZeroElems = size_t{1} << 16;

}  // namespace

InPlaceAdamW::InPlaceAdamW(const std::vector<size_t>& numels, offload::HostPool& pool)
    : numels_(numels) {
  offsets_.reserve(numels.size() + 1);
  offsets_.push_back(0);
  for (size_t n : numels) offsets_.push_back(offsets_.back() + n);
  const size_t total = offsets_.back();
  TZ_CHECK(total > 0, "OffloadAdamW: no elements to update in place", "");
  // Checked here first so that the message names OffloadAdamW's own knob (the pool's names the
  // trainer's).
  const size_t need = 2 * offload::HostPool::round_size(total * sizeof(float)) +
                      offload::HostPool::round_size(kZeroElems * sizeof(float));
  const offload::HostPoolStats stats = pool.stats();
  TZ_CHECK(stats.in_use + need <= stats.budget,
           "OffloadAdamW: Adam's moments need " + std::to_string(need) +
               " bytes of pinned host memory, the host budget leaves " +
               std::to_string(stats.budget - std::min(stats.budget, stats.in_use)),
           "raise host_budget to at least " + std::to_string(stats.in_use + need) +
               " bytes, or pass state='nvme'");
  m_ = pool.allocate(total * sizeof(float), Category::optimizer, "offload_adamw exp_avg");
  v_ = pool.allocate(total * sizeof(float), Category::optimizer, "offload_adamw exp_avg_sq");
  zeros_ = pool.allocate(kZeroElems * sizeof(float), Category::workspace, "offload_adamw zeros");
  std::memset(m_.data(), 0, total * sizeof(float));
  std::memset(v_.data(), 0, total * sizeof(float));
  std::memset(zeros_.data(), 0, kZeroElems * sizeof(float));
}

float* InPlaceAdamW::exp_avg(size_t i) {
  return static_cast<float*>(m_.data()) + offsets_.at(i);
}

float* InPlaceAdamW::exp_avg_sq(size_t i) {
  return static_cast<float*>(v_.data()) + offsets_.at(i);
}

void InPlaceAdamW::update(size_t i, float* param, const float* grad,
                          const kernels::AdamWParams& p) {
  float* m = exp_avg(i);     // (n)
  float* v = exp_avg_sq(i);  // (n)
  const size_t n = numel(i);
  if (grad != nullptr) {
    kernels::cpu::adamw_update(param, m, v, grad, n, p);
    return;
  }
  const auto* zeros = static_cast<const float*>(zeros_.data());  // (kZeroElems)
  for (size_t at = 0; at < n; at += kZeroElems) {
    const size_t count = std::min(kZeroElems, n - at);
    kernels::cpu::adamw_update(param + at, m + at, v + at, zeros, count, p);
  }
}

}  // namespace tierzero::python
