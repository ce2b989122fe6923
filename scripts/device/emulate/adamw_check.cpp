// The CUDA backend's AdamW (elementwise.cu: adamw_element, adamw_kernel, adamw_segments_kernel and
// their launchers, extracted by emulate_adamw.sh into adamw_body.inc with each launch turned into
// emulate_launch) run on the CPU under cuda_host_emulation.hpp. On 150 segments (133 not empty:
// three launches of 64) of varying lengths, some empty, with gaps between them, alternating weight
// decay, random states and gradients with zeros and tiny values, for each copy type (none, bf16,
// fp16, fp32): launch_adamw_segments against launch_adamw per segment followed by the conversion
// (bit for bit: the same element function), against a double reference of torch.optim.AdamW's
// update (within 1e-6 of each parameter's magnitude plus lr), the copy against the parameters'
// rounding (dtype_bits, bit for bit), the gaps untouched, and the same bits with every launch's
// blocks in a shuffled order. The grid is capped at 3 blocks (any grid gives the same result; a
// small one keeps the emulation fast and makes the grid-stride loops go round). Exits 1 on any
// failure.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "cuda_host_emulation.hpp"
#include "tierzero/core/dtype_bits.hpp"
#include "tierzero/kernels/kernels.hpp"

#define TZ_CHECK(cond, what, hint)               \
  do {                                           \
    if (!(cond)) throw std::runtime_error(what); \
  } while (0)
#define TZ_CUDA_CHECK_LAUNCH()

namespace tierzero::kernels::cuda_impl {

using cudaStream_t = void*;
struct dim3 {
  unsigned x, y, z;
  dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};
constexpr int kBlockSize = 256;             // cuda_common.cuh's
constexpr size_t kMaxGridStrideBlocks = 3;  // cuda_common.cuh's is 65536; see the header comment
inline size_t ceil_div(size_t a, size_t b) {
  return (a + b - 1) / b;
}
inline unsigned grid_stride_blocks(size_t n) {
  const size_t blocks = ceil_div(n, static_cast<size_t>(kBlockSize));
  return static_cast<unsigned>(blocks < kMaxGridStrideBlocks ? blocks : kMaxGridStrideBlocks);
}
inline size_t global_thread_index() {
  return static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
inline size_t grid_stride() {
  return static_cast<size_t>(gridDim.x) * blockDim.x;
}
uint32_t g_shuffle_seed = 0;
template <typename F>
void emulate_launch(unsigned blocks, F kernel) {
  emulate(blocks, kBlockSize, 0, kernel, g_shuffle_seed);
}
template <typename F>
void emulate_launch(const dim3& grid, F kernel) {
  emulate(Dim3{grid.x, grid.y, 1}, Dim3{kBlockSize, 1, 1}, 0, kernel, g_shuffle_seed);
}

#include "adamw_body.inc"

}  // namespace tierzero::kernels::cuda_impl

namespace {

using namespace tierzero;
using namespace tierzero::kernels;

struct State {
  std::vector<float> param, m, v;  // (n) each
  std::vector<uint16_t> copy;      // (2 n) 16-bit words: an fp32 copy takes two per element
};

State fresh(size_t n, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  State s{std::vector<float>(n), std::vector<float>(n), std::vector<float>(n),
          std::vector<uint16_t>(2 * n, 0x7777)};
  for (size_t i = 0; i < n; ++i) {
    s.param[i] = normal(rng);
    s.m[i] = 0.1f * normal(rng);
    s.v[i] = s.m[i] * s.m[i] + 1e-4f;
  }
  return s;
}

// torch.optim.AdamW's update in double, one element.
double reference(double p, double m, double v, double g, const AdamWParams& a, float wd) {
  g *= a.grad_scale;
  m = m + (1.0 - a.beta1) * (g - m);
  v = v * a.beta2 + (1.0 - a.beta2) * g * g;
  const double step = static_cast<double>(a.step);
  const double bc1 = 1.0 - std::pow(static_cast<double>(a.beta1), step);
  const double bc2 = 1.0 - std::pow(static_cast<double>(a.beta2), step);
  p *= 1.0 - static_cast<double>(a.lr) * wd;
  return p - a.lr / bc1 * (m / (std::sqrt(v) / std::sqrt(bc2) + a.eps));
}

size_t words_differing(const State& a, const State& b) {
  size_t d = 0;
  for (size_t i = 0; i < a.param.size(); ++i) {
    d += std::memcmp(&a.param[i], &b.param[i], 4) != 0;
    d += std::memcmp(&a.m[i], &b.m[i], 4) != 0;
    d += std::memcmp(&a.v[i], &b.v[i], 4) != 0;
  }
  for (size_t i = 0; i < a.copy.size(); ++i) d += a.copy[i] != b.copy[i];
  return d;
}

}  // namespace

int main() {
  using namespace tierzero::kernels::cuda_impl;
  std::vector<AdamWSegment> segments;
  size_t at = 5;
  for (size_t i = 0; i < 150; ++i) {
    const size_t count = i % 9 == 4 ? 0 : 1 + (i * 131) % 1100;
    segments.push_back({at, count, i % 2 == 0 ? 0.1f : 0.0f});
    at += count + i % 3;
  }
  const size_t n = at + 7;
  std::mt19937 rng(17);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> grad(n);
  for (size_t i = 0; i < n; ++i)
    grad[i] = i % 97 == 0 ? 0.0f : (i % 89 == 1 ? 1e-7f : 1.0f) * normal(rng);
  const AdamWParams p{1e-2f, 0.9f, 0.95f, 1e-8f, 0.5f, 0.7f, 3};
  const State start = fresh(n, rng);
  std::vector<char> covered(n, 0);
  for (const AdamWSegment& s : segments)
    std::fill(covered.begin() + static_cast<long>(s.offset),
              covered.begin() + static_cast<long>(s.offset + s.count), 1);

  bool ok = true;
  const struct {
    const char* name;
    bool copy;
    DType type;
  } kinds[] = {{"no copy", false, DType::f32},
               {"bf16 copy", true, DType::bf16},
               {"fp16 copy", true, DType::f16},
               {"fp32 copy", true, DType::f32}};
  for (const auto& k : kinds) {
    auto segmented = [&](uint32_t seed) {
      State s = start;
      g_shuffle_seed = seed;
      launch_adamw_segments(nullptr, s.param.data(), s.m.data(), s.v.data(), grad.data(),
                            k.copy ? static_cast<void*>(s.copy.data()) : nullptr, k.type,
                            segments.data(), segments.size(), p);
      return s;
    };
    const State seg = segmented(0), shuffled = segmented(91);
    State per = start;
    g_shuffle_seed = 0;
    for (const AdamWSegment& s : segments) {
      if (s.count == 0) continue;
      AdamWParams ps = p;
      ps.weight_decay = s.weight_decay;
      const size_t o = s.offset;
      launch_adamw(nullptr, per.param.data() + o, per.m.data() + o, per.v.data() + o,
                   grad.data() + o, s.count, ps);
      // The copy as the conversion after the update writes it (dtype_bits).
      for (size_t i = o; k.copy && i < o + s.count; ++i) {
        if (k.type == DType::f32)
          std::memcpy(reinterpret_cast<char*>(per.copy.data()) + 4 * i, &per.param[i], 4);
        else
          per.copy[i] = k.type == DType::bf16 ? dtype_bits::float_to_bf16(per.param[i])
                                              : dtype_bits::float_to_f16(per.param[i]);
      }
    }
    double worst = 0.0;
    size_t gaps = 0, copies = 0;
    for (size_t i = 0; i < n; ++i) {
      if (!covered[i]) {
        gaps += std::memcmp(&seg.param[i], &start.param[i], 4) != 0 || seg.m[i] != start.m[i];
        continue;
      }
      float wd = 0.0f;
      for (const AdamWSegment& s : segments)
        if (i >= s.offset && i < s.offset + s.count) wd = s.weight_decay;
      const double ref = reference(start.param[i], start.m[i], start.v[i], grad[i], p, wd);
      // Relative to the terms' magnitude (the parameter and a step of about lr), which is what
      // fp32's roundings are proportional to.
      const double magnitude = std::fabs(static_cast<double>(start.param[i])) + p.lr;
      worst = std::max(worst, std::fabs(seg.param[i] - ref) / magnitude);
      if (k.copy) {
        uint32_t want = 0, got = 0;
        if (k.type == DType::f32) {
          std::memcpy(&want, &seg.param[i], 4);
          std::memcpy(&got, reinterpret_cast<const char*>(seg.copy.data()) + 4 * i, 4);
        } else {
          want = k.type == DType::bf16 ? dtype_bits::float_to_bf16(seg.param[i])
                                       : dtype_bits::float_to_f16(seg.param[i]);
          got = seg.copy[i];
        }
        copies += want != got;
      }
    }
    for (size_t w = 0; w < seg.copy.size(); ++w) {  // words no element's copy owns stay as set
      const size_t elem = k.type == DType::f32 ? w / 2 : w;
      if ((!k.copy || elem >= n || !covered[elem]) && seg.copy[w] != 0x7777) ++gaps;
    }
    const size_t vs_per = words_differing(seg, per), vs_shuffled = words_differing(seg, shuffled);
    std::printf(
        "adamw segments, %s: max err %.2e vs double; %zu words differ from the "
        "per-segment launches, %zu with blocks shuffled; %zu copies differ from the "
        "rounding; %zu gap elements changed\n",
        k.name, worst, vs_per, vs_shuffled, copies, gaps);
    ok = ok && worst <= 1e-6 && vs_per == 0 && vs_shuffled == 0 && copies == 0 && gaps == 0;
  }
  std::printf("%s\n", ok ? "emulate_adamw: ok" : "emulate_adamw: FAILED");
  return ok ? 0 : 1;
}
