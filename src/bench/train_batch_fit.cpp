// The largest micro-batch that fits (train_batch_fit.hpp).
#include "train_batch_fit.hpp"

#include <algorithm>

#include "tierzero/nn/gpt.hpp"

namespace tierzero::bench {

size_t step_budget(Device& device, size_t requested, size_t tracked_reserved) {
  if (requested > 0) return requested;
  const size_t total = device.total_memory();
  const int64_t used = device.driver_used_bytes();
  if (used < 0) return total;  // the CPU: its memory, nothing of it reported used
  const size_t untracked = static_cast<size_t>(used) > tracked_reserved
                               ? static_cast<size_t>(used) - tracked_reserved
                               : 0;
  const size_t margin = std::max<size_t>(size_t{512} << 20, total / 100 * 3);
  return total > untracked + margin ? total - untracked - margin : 0;
}

BatchFit largest_fitting_batch(const nn::GPTConfig& cfg, size_t T, size_t peak_at_one,
                               size_t budget, size_t max_batch, DType compute) {
  auto activations = [&](size_t B) {
    return nn::GPT::activation_bytes_for(cfg, B, T, nn::Recompute::none, 1, false, 1, compute);
  };
  const size_t act_one = activations(1);
  const size_t fixed = peak_at_one > act_one ? peak_at_one - act_one : 0;
  auto peak = [&](size_t B) { return fixed + activations(B); };
  BatchFit fit;
  fit.budget = budget;
  fit.peak_at_one = peak_at_one;
  if (peak(1) > budget) {
    fit.next_peak = peak(1);
    return fit;
  }
  // act(B) grows with B: double past the budget, then bisect (lo fits, hi does not).
  size_t lo = 1, hi = 2;
  while (hi <= max_batch && peak(hi) <= budget) {
    lo = hi;
    hi *= 2;
  }
  hi = std::min(hi, max_batch + 1);
  while (hi - lo > 1) {
    const size_t mid = lo + (hi - lo) / 2;
    (peak(mid) <= budget ? lo : hi) = mid;
  }
  fit.batch = lo;
  fit.predicted_peak = peak(lo);
  fit.next_peak = lo < max_batch ? peak(lo + 1) : 0;
  return fit;
}

}  // namespace tierzero::bench
