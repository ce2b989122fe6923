// The CPU's tiled attention (flash_attention_forward/backward) against the naive kernel it
// replaced (attention_forward/backward, kept as the reference): the output and dq, dk, dv over
// sequence lengths that are below, at and past one tile (1, 7, 64, 257), head dims 64 and 128,
// and grouped kv heads. The naive kernel knows only multi-head attention, so for a GQA shape the
// reference runs on the kv heads repeated per query head and sums their gradients back per kv head.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "tierzero/core/error.hpp"
#include "tierzero/kernels/cpu_ops.hpp"

namespace tierzero::test {
namespace {

using kernels::AttentionShape;

std::vector<float> random_normal(size_t n, uint32_t seed, float stddev) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> dist(0.0f, stddev);
  std::vector<float> v(n);
  for (float& x : v) x = dist(gen);
  return v;
}

// max |a - b| / max |b|: fp32 roundoff relative to the tensor's scale.
// Infinite where a holds a non-finite value (std::max would pass a NaN over).
double relative_error(const std::vector<float>& a, const std::vector<float>& b) {
  double diff = 0.0, scale = 0.0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!std::isfinite(a[i])) return std::numeric_limits<double>::infinity();
    diff = std::max(diff, static_cast<double>(std::fabs(a[i] - b[i])));
    scale = std::max(scale, static_cast<double>(std::fabs(b[i])));
  }
  return scale > 0.0 ? diff / scale : diff;
}

// qkv of a GQA shape (B, T, (NH + 2 NKV) hd) -> the multi-head layout (B, T, 3 NH hd) with each
// query head's kv head copied in.
std::vector<float> expand_kv(const std::vector<float>& qkv, const AttentionShape& s) {
  const size_t hd = s.head_dim, NH = s.n_head, group = NH / s.n_kv_head, C = NH * hd;
  std::vector<float> out(s.B * s.T * 3 * C);
  for (size_t bt = 0; bt < s.B * s.T; ++bt) {
    const float* src = qkv.data() + bt * s.qkv_width();
    float* dst = out.data() + bt * 3 * C;
    std::copy(src, src + C, dst);
    for (size_t h = 0; h < NH; ++h)
      for (size_t part = 1; part <= 2; ++part) {
        const float* from = src + C + (part - 1) * s.kv_width() + (h / group) * hd;
        std::copy(from, from + hd, dst + part * C + h * hd);
      }
  }
  return out;
}

// The multi-head gradient (B, T, 3 NH hd) -> the GQA layout, summing each kv head's copies.
std::vector<float> reduce_kv(const std::vector<float>& dqkv_mha, const AttentionShape& s) {
  const size_t hd = s.head_dim, NH = s.n_head, group = NH / s.n_kv_head, C = NH * hd;
  std::vector<float> out(s.B * s.T * s.qkv_width(), 0.0f);
  for (size_t bt = 0; bt < s.B * s.T; ++bt) {
    const float* src = dqkv_mha.data() + bt * 3 * C;
    float* dst = out.data() + bt * s.qkv_width();
    std::copy(src, src + C, dst);
    for (size_t h = 0; h < NH; ++h)
      for (size_t part = 1; part <= 2; ++part) {
        float* to = dst + C + (part - 1) * s.kv_width() + (h / group) * hd;
        for (size_t d = 0; d < hd; ++d) to[d] += src[part * C + h * hd + d];
      }
  }
  return out;
}

struct Case {
  size_t B, T, NH, NKV, hd;
};

std::string describe(const Case& c) {
  return "B" + std::to_string(c.B) + " T" + std::to_string(c.T) + " NH" + std::to_string(c.NH) +
         " NKV" + std::to_string(c.NKV) + " hd" + std::to_string(c.hd);
}

void check_case(const Case& c, uint32_t seed) {
  const AttentionShape s{c.B, c.T, c.NH, c.NKV, c.hd};
  const size_t C = c.NH * c.hd, n_out = c.B * c.T * C;
  // Standard deviation 1.5: peaked softmax rows, so the running max is exercised.
  const std::vector<float> qkv = random_normal(c.B * c.T * s.qkv_width(), seed, 1.5f);
  const std::vector<float> dout = random_normal(n_out, seed + 1, 1.0f);

  // Reference: the naive kernel on the multi-head layout.
  const std::vector<float> qkv_mha = expand_kv(qkv, s);
  std::vector<float> ref_out(n_out), att(c.B * c.NH * c.T * c.T), datt(att.size());
  kernels::cpu::attention_forward(ref_out.data(), att.data(), qkv_mha.data(), c.B, c.T, C, c.NH);
  std::vector<float> ref_dqkv_mha(qkv_mha.size(), 0.0f);
  kernels::cpu::attention_backward(ref_dqkv_mha.data(), datt.data(), dout.data(), qkv_mha.data(),
                                   att.data(), c.B, c.T, C, c.NH);
  const std::vector<float> ref_dqkv = reduce_kv(ref_dqkv_mha, s);

  // Tiled.
  std::vector<float> out(n_out), lse(c.B * c.NH * c.T);
  kernels::cpu::flash_attention_forward(out.data(), lse.data(), qkv.data(), s);
  // NaN: the backward writes every element of dqkv and reads none.
  std::vector<float> dqkv(qkv.size(), std::numeric_limits<float>::quiet_NaN());
  kernels::cpu::flash_attention_backward(dqkv.data(), dout.data(), out.data(), qkv.data(),
                                         lse.data(), s);

  // The saved logsumexp is the log of the softmax's normaliser: exp(score - lse) is the
  // probability, so for the first key of each row it must match the naive kernel's.
  std::vector<float> p0(lse.size()), ref_p0(lse.size());
  for (size_t bh = 0; bh < c.B * c.NH; ++bh)
    for (size_t t = 0; t < c.T; ++t) {
      const size_t b = bh / c.NH, h = bh % c.NH, kvh = h / (c.NH / c.NKV);
      const float* q = qkv.data() + (b * c.T + t) * s.qkv_width() + h * c.hd;
      const float* k = qkv.data() + b * c.T * s.qkv_width() + C + kvh * c.hd;
      double dot = 0.0;
      for (size_t d = 0; d < c.hd; ++d) dot += static_cast<double>(q[d]) * k[d];
      p0[bh * c.T + t] = static_cast<float>(
          std::exp(dot / std::sqrt(static_cast<double>(c.hd)) - lse[bh * c.T + t]));
      ref_p0[bh * c.T + t] = att[(bh * c.T + t) * c.T];
    }

  // Split dqkv into its parts for the report.
  auto part = [&](const std::vector<float>& v, size_t begin, size_t width) {
    std::vector<float> r;
    for (size_t bt = 0; bt < c.B * c.T; ++bt)
      r.insert(r.end(), v.begin() + bt * s.qkv_width() + begin,
               v.begin() + bt * s.qkv_width() + begin + width);
    return r;
  };
  const double e_out = relative_error(out, ref_out);
  const double e_p0 = relative_error(p0, ref_p0);
  const double e_dq = relative_error(part(dqkv, 0, C), part(ref_dqkv, 0, C));
  const double e_dk = relative_error(part(dqkv, C, s.kv_width()), part(ref_dqkv, C, s.kv_width()));
  const double e_dv = relative_error(part(dqkv, C + s.kv_width(), s.kv_width()),
                                     part(ref_dqkv, C + s.kv_width(), s.kv_width()));
  std::printf("%-28s max rel err: out %.2e  p0 %.2e  dq %.2e  dk %.2e  dv %.2e\n",
              describe(c).c_str(), e_out, e_p0, e_dq, e_dk, e_dv);
  const double tol = 1e-5;  // fp32 roundoff of sums in another order
  EXPECT_LT(e_out, tol) << describe(c);
  EXPECT_LT(e_p0, tol) << describe(c);
  EXPECT_LT(e_dq, tol) << describe(c);
  EXPECT_LT(e_dk, tol) << describe(c);
  EXPECT_LT(e_dv, tol) << describe(c);
}

TEST(TiledAttention, MatchesNaiveMultiHead) {
  uint32_t seed = 1000;
  for (size_t T : {1, 7, 64, 257})
    for (size_t hd : {64, 128}) {
      check_case({2, T, 3, 3, hd}, seed);
      seed += 3;
    }
}

TEST(TiledAttention, MatchesNaiveGroupedKvHeads) {
  uint32_t seed = 2000;
  for (size_t T : {1, 7, 64, 257})
    for (Case c : {Case{1, T, 4, 2, 64}, Case{2, T, 8, 1, 128}, Case{1, T, 6, 3, 128}}) {
      check_case(c, seed);
      seed += 3;
    }
}

TEST(TiledAttention, ResultDoesNotDependOnTheThreadCount) {
  const AttentionShape s{2, 130, 4, 2, 64};
  const std::vector<float> qkv = random_normal(s.B * s.T * s.qkv_width(), 77, 1.5f);
  const std::vector<float> dout = random_normal(s.B * s.T * s.q_width(), 78, 1.0f);
  auto run = [&](int threads) {
    const int before = kernels::cpu::threads();
    kernels::cpu::set_threads(threads);
    std::vector<float> out(dout.size()), lse(s.B * s.n_head * s.T);
    std::vector<float> dqkv(qkv.size(), std::numeric_limits<float>::quiet_NaN());  // written whole
    kernels::cpu::flash_attention_forward(out.data(), lse.data(), qkv.data(), s);
    kernels::cpu::flash_attention_backward(dqkv.data(), dout.data(), out.data(), qkv.data(),
                                           lse.data(), s);
    kernels::cpu::set_threads(before);
    out.insert(out.end(), lse.begin(), lse.end());
    out.insert(out.end(), dqkv.begin(), dqkv.end());
    return out;
  };
  const std::vector<float> one = run(1), two = run(2), three = run(3);
  EXPECT_TRUE(one == two) << "1 vs 2 threads differ";
  EXPECT_TRUE(one == three) << "1 vs 3 threads differ";
}

TEST(TiledAttention, RejectsKvHeadsThatDoNotDivideHeads) {
  std::vector<float> buf(64, 0.0f);
  const AttentionShape bad{1, 2, 4, 3, 2};
  EXPECT_THROW(kernels::cpu::flash_attention_forward(buf.data(), buf.data(), buf.data(), bad),
               Error);
  const AttentionShape no_dim{1, 2, 4, 4, 0};
  EXPECT_THROW(kernels::cpu::flash_attention_backward(buf.data(), buf.data(), buf.data(),
                                                      buf.data(), buf.data(), no_dim),
               Error);
}

}  // namespace
}  // namespace tierzero::test
