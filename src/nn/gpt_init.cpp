// GPT-2 initialisation (as in GPT-2 and llm.c): N(0, 0.02) weights, the residual output
// projections scaled by 1/sqrt(2 L) so the residual stream's variance does not grow with depth,
// zero biases and unit layernorm gains. Every weight is a counter-based draw keyed by (seed,
// tensor) and indexed by its place in the full tensor, so any range of any rank's layout (its
// shard, its tensor-parallel piece, its pipeline stage) is drawn alone, and equals the same
// elements of the one-rank model: no rank ever builds the whole model to keep a piece of it.
#include <algorithm>
#include <cmath>

#include "tierzero/core/error.hpp"
#include "tierzero/core/random.hpp"
#include "tierzero/nn/gpt.hpp"

namespace tierzero::nn {

namespace {

// The standard deviation of a tensor's normal draw, 0 for a constant tensor.
double init_std(ParamKind kind, size_t num_layers) {
  switch (kind) {
    case ParamKind::attprojw:
    case ParamKind::fcprojw:
      return 0.02 / std::sqrt(2.0 * static_cast<double>(num_layers));
    case ParamKind::wte:
    case ParamKind::wpe:
    case ParamKind::qkvw:
    case ParamKind::fcw:
    case ParamKind::lmheadw:
      return 0.02;
    default:
      return 0.0;
  }
}

bool is_norm_gain(ParamKind kind) {
  return kind == ParamKind::ln1w || kind == ParamKind::ln2w || kind == ParamKind::lnfw;
}

uint64_t tensor_id(const TensorMeta& m) {
  return static_cast<uint64_t>(m.kind) * 0x10000ull + static_cast<uint64_t>(m.layer + 1);
}

}  // namespace

void init_gpt2_range(const ParamLayout& layout, const GPTConfig& config, uint64_t seed,
                     size_t begin, size_t count, float* out) {
  TZ_CHECK(begin <= layout.total_numel() && count <= layout.total_numel() - begin,
           "init_gpt2_range: elements [" + std::to_string(begin) + ", " +
               std::to_string(begin + count) + ") are outside the layout's " +
               std::to_string(layout.total_numel()),
           "");
  std::fill(out, out + count, 0.0f);  // padding and biases
  const size_t end = begin + count;
  for (const ParamTensor& t : layout.tensors()) {
    const size_t lo = std::max(begin, t.offset);
    const size_t hi = std::min(end, t.offset + t.numel);
    if (lo >= hi) continue;
    float* dst = out + (t.offset - begin);  // the tensor's local element 0
    if (is_norm_gain(t.kind)) {
      std::fill(out + (lo - begin), out + (hi - begin), 1.0f);
      continue;
    }
    const double std = init_std(t.kind, config.num_layers);
    if (std == 0.0) continue;
    const uint64_t key = stream_key(seed, tensor_id(t));
    const size_t want_lo = lo - t.offset, want_hi = hi - t.offset;  // local elements wanted
    t.for_each_local_run(layout.tp(), [&](size_t full, size_t local, size_t n) {
      const size_t a = std::max(local, want_lo), b = std::min(local + n, want_hi);
      if (a >= b) return;
      const auto first = static_cast<int64_t>(a), last = static_cast<int64_t>(b);
#pragma omp parallel for schedule(static) if (last - first > 65536)
      for (int64_t x = first; x < last; ++x)
        dst[x] =
            static_cast<float>(std * counter_normal(key, full + (static_cast<size_t>(x) - local)));
    });
  }
}

void init_gpt2_params(const ParamLayout& layout, const GPTConfig& config, uint64_t seed,
                      float* host_params) {
  init_gpt2_range(layout, config, seed, 0, layout.total_numel(), host_params);
}

}  // namespace tierzero::nn
