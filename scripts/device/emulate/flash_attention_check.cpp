// The kernels of kernels/cuda/flash_attention.cu (or, built with -DTZ_EMULATE_TC, those of
// flash_attention_tc.cu under wmma_host_emulation.hpp too) run on the CPU under
// cuda_host_emulation.hpp against a double-precision causal attention (forward, logsumexp, and the
// backward, which must write dqkv whole: it starts as NaN, so an element left unwritten or read
// before its first write fails), over tile edges, head dims 4-128, grouped kv heads and
// both qkv layouts. Prints the max error relative to each tensor's largest value; exits 1 past
// kLimit. Each case runs a second time with every kernel's blocks in a shuffled order and must give
// the same bits (the backward's dq pass exists for that). The 16-bit instances (qkv, out, dout and
// dqkv in bf16 or fp16, kernels.hpp's 16-bit attention; the cases alternate the two types) must
// give the bits of the fp32 instances on the widened tensors with out and dqkv rounded. Built and
// run by emulate_flash_attention.sh, which extracts the kernels into kernels_body.inc.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include "cuda_host_emulation.hpp"
#ifdef TZ_EMULATE_TC
#include "wmma_host_emulation.hpp"
#endif
#include "flash_attention_dims.cuh"
using namespace tierzero::kernels::cuda_impl;
#include "kernels_body.inc"

// The largest error allowed, relative to each tensor's largest value: fp32 roundoff for the fp32
// kernels; for the tensor-core ones, whose q, k, v, dout, P and dS are rounded to bf16 (8
// significant bits, a relative error of 2^-9 each) before their products, 3e-2.
#ifdef TZ_EMULATE_TC
constexpr double kLimit = 3e-2;
#else
constexpr double kLimit = 1e-5;
#endif

struct Case {
  size_t B, T, NH, NKV, D;
  bool grouped;
};

// Offsets of head h's q, and kv head's k, v in a qkv row (the layouts of kernels.hpp).
size_t qo(const Case& c, size_t h) {
  size_t rep = c.NH / c.NKV, kvh = h / rep;
  return c.grouped ? (kvh * (rep + 2) + h % rep) * c.D : h * c.D;
}
size_t ko(const Case& c, size_t kvh) {
  size_t rep = c.NH / c.NKV;
  return c.grouped ? (kvh * (rep + 2) + rep) * c.D : (c.NH + kvh) * c.D;
}
size_t vo(const Case& c, size_t kvh) {
  size_t rep = c.NH / c.NKV;
  return c.grouped ? (kvh * (rep + 2) + rep + 1) * c.D : (c.NH + c.NKV + kvh) * c.D;
}

// One forward (unless `backward_only`: out and lse are given) and backward of the case, with
// tensors of element type E (float, or a 16-bit type of storage16.cuh); a non-zero shuffle_seed
// runs every kernel's blocks in a shuffled order.
template <int kMaxDim, typename E>
void run(const Case& c, std::vector<E>& out, std::vector<float>& lse, std::vector<E>& dqkv,
         const std::vector<E>& qkv, const std::vector<E>& dout, uint32_t shuffle_seed,
         bool backward_only = false) {
  FlashDims s{};
  s.B = c.B;
  s.T = c.T;
  s.NH = c.NH;
  s.NKV = c.NKV;
  s.D = c.D;
  s.W = (c.NH + 2 * c.NKV) * c.D;
  s.rep = c.NH / c.NKV;
  s.grouped = c.grouped;
  s.scale = 1.0f / std::sqrt((float)c.D);
  s.scale_log2 = s.scale * kLog2e;
  s.tiles = ceil_div(c.T, kTile);
#ifdef TZ_EMULATE_TC
  const unsigned threads = kTcThreads;
  const size_t fb = forward_bytes<kMaxDim>(), bb = BackwardSmem<kMaxDim>::bytes();
#define TZ_KERNEL(name) flash_tc_##name<kMaxDim>
#else
  const unsigned threads = kThreads;
  size_t fb = (3 * kTile * (kMaxDim + 1) + kTile * kProbStride) * 4;
  size_t bb = (4 * kTile * (kMaxDim + 1) + kTile * kProbStride + 2 * kTile) * 4;
#define TZ_KERNEL(name) flash_##name<kMaxDim>
#endif
  if (!backward_only) {
    emulate(
        s.tiles * s.B * s.NH, threads, fb,
        [&] {
          TZ_KERNEL(forward_kernel)
          (out.data(), lse.data(), qkv.data(), s);
        },
        shuffle_seed);
  }
  emulate(
      s.tiles * s.B * s.NKV, threads, bb,
      [&] {
        TZ_KERNEL(backward_dkdv_kernel)
        (dqkv.data(), dout.data(), out.data(), qkv.data(), lse.data(), s);
      },
      shuffle_seed);
  emulate(
      s.tiles * s.B * s.NH, threads, bb,
      [&] {
        TZ_KERNEL(backward_dq_kernel)
        (dqkv.data(), dout.data(), out.data(), qkv.data(), lse.data(), s);
      },
      shuffle_seed);
#undef TZ_KERNEL
}

// One run of a case: out, lse and dqkv (B, T, W), every one NaN before the kernels run (unless
// `given`, whose out and lse the backward then takes).
template <typename E>
struct Run {
  std::vector<E> out;
  std::vector<float> lse;
  std::vector<E> dqkv;
};
template <typename E = float>
Run<E> run_case(const Case& c, const std::vector<E>& qkv, const std::vector<E>& dout,
                uint32_t shuffle_seed, const Run<E>* given = nullptr) {
  const E nan = from_f32<E>(std::nanf(""));
  Run<E> r{std::vector<E>(dout.size(), nan), std::vector<float>(c.B * c.NH * c.T, std::nanf("")),
           std::vector<E>(qkv.size(), nan)};
  if (given != nullptr) {
    r.out = given->out;
    r.lse = given->lse;
  }
  const bool backward_only = given != nullptr;
  if (c.D <= 32)
    run<32>(c, r.out, r.lse, r.dqkv, qkv, dout, shuffle_seed, backward_only);
  else if (c.D <= 64)
    run<64>(c, r.out, r.lse, r.dqkv, qkv, dout, shuffle_seed, backward_only);
  else
    run<128>(c, r.out, r.lse, r.dqkv, qkv, dout, shuffle_seed, backward_only);
  return r;
}

// The 16-bit instances on qkv and dout rounded to T against the fp32 ones on the widened values:
// the forward's out rounded and its lse, then the backward from the 16-bit out (what 16-bit
// training keeps), its dqkv rounded. Returns the elements whose bits differ.
template <typename T>
size_t sixteen_bit_differences(const Case& c, const std::vector<float>& qkv,
                               const std::vector<float>& dout) {
  const auto to16 = [](const std::vector<float>& x) {
    std::vector<T> r(x.size());
    for (size_t i = 0; i < x.size(); ++i) r[i] = from_f32<T>(x[i]);
    return r;
  };
  const auto widened = [](const std::vector<T>& x) {
    std::vector<float> r(x.size());
    for (size_t i = 0; i < x.size(); ++i) r[i] = to_f32(x[i]);
    return r;
  };
  const std::vector<T> qkv16 = to16(qkv), dout16 = to16(dout);
  const Run<T> r16 = run_case<T>(c, qkv16, dout16, 0);
  Run<float> r32 = run_case<float>(c, widened(qkv16), widened(dout16), 0);
  size_t differ =
      bit_differences(widened(r16.out), widened(to16(r32.out))) + bit_differences(r16.lse, r32.lse);
  r32.out = widened(r16.out);
  r32 = run_case<float>(c, widened(qkv16), widened(dout16), 0, &r32);
  return differ + bit_differences(widened(r16.dqkv), widened(to16(r32.dqkv)));
}

int main() {
  std::vector<Case> cases = {{2, 7, 4, 4, 12, false},    {1, 1, 2, 2, 4, false},
                             {1, 65, 3, 3, 64, false},   {2, 64, 4, 2, 64, true},
                             {1, 130, 4, 2, 128, false}, {1, 70, 6, 3, 128, true},
                             {2, 33, 8, 1, 16, true},    {1, 129, 2, 1, 64, false}};
  int worst_fail = 0;
  uint32_t seed = 1;
  for (const Case& c : cases) {
    const size_t W = (c.NH + 2 * c.NKV) * c.D, C = c.NH * c.D;
    std::mt19937 g(seed++);
    std::normal_distribution<float> n(0.f, 1.5f), n1(0.f, 1.f);
    std::vector<float> qkv(c.B * c.T * W), dout(c.B * c.T * C);
    for (auto& x : qkv) x = n(g);
    for (auto& x : dout) x = n1(g);
    Run<float> first = run_case(c, qkv, dout, 0);
    const std::vector<float>&out = first.out, &lse = first.lse, &dqkv = first.dqkv;
    // Double reference.
    std::vector<double> rout(out.size()), rd(qkv.size(), 0.0), rlse(lse.size());
    const double scale = 1.0 / std::sqrt((double)c.D);
    for (size_t b = 0; b < c.B; ++b)
      for (size_t h = 0; h < c.NH; ++h) {
        size_t kvh = h / (c.NH / c.NKV);
        for (size_t i = 0; i < c.T; ++i) {
          const float* q = &qkv[(b * c.T + i) * W + qo(c, h)];
          std::vector<double> p(i + 1);
          double mx = -1e300;
          for (size_t j = 0; j <= i; ++j) {
            const float* k = &qkv[(b * c.T + j) * W + ko(c, kvh)];
            double d = 0;
            for (size_t e = 0; e < c.D; ++e) d += (double)q[e] * k[e];
            p[j] = d * scale;
            mx = std::max(mx, p[j]);
          }
          double sum = 0;
          for (auto& x : p) {
            x = std::exp(x - mx);
            sum += x;
          }
          for (auto& x : p) x /= sum;
          rlse[(b * c.NH + h) * c.T + i] = mx + std::log(sum);
          std::vector<double> o(c.D, 0.0);
          for (size_t j = 0; j <= i; ++j) {
            const float* v = &qkv[(b * c.T + j) * W + vo(c, kvh)];
            for (size_t e = 0; e < c.D; ++e) o[e] += p[j] * v[e];
          }
          for (size_t e = 0; e < c.D; ++e) rout[(b * c.T + i) * C + h * c.D + e] = o[e];
          // backward for this row
          const float* go = &dout[(b * c.T + i) * C + h * c.D];
          std::vector<double> dp(i + 1);
          double Dd = 0;
          for (size_t e = 0; e < c.D; ++e) Dd += go[e] * o[e];
          for (size_t j = 0; j <= i; ++j) {
            const float* v = &qkv[(b * c.T + j) * W + vo(c, kvh)];
            double d = 0;
            for (size_t e = 0; e < c.D; ++e) d += (double)go[e] * v[e];
            dp[j] = d;
            for (size_t e = 0; e < c.D; ++e) rd[(b * c.T + j) * W + vo(c, kvh) + e] += p[j] * go[e];
          }
          for (size_t j = 0; j <= i; ++j) {
            double ds = p[j] * (dp[j] - Dd) * scale;
            const float* k = &qkv[(b * c.T + j) * W + ko(c, kvh)];
            for (size_t e = 0; e < c.D; ++e) {
              rd[(b * c.T + i) * W + qo(c, h) + e] += ds * k[e];
              rd[(b * c.T + j) * W + ko(c, kvh) + e] += ds * q[e];
            }
          }
        }
      }
    auto err = [](const std::vector<float>& a, const std::vector<double>& r) {
      double diff = 0, sc = 0;
      for (size_t i = 0; i < a.size(); ++i) {
        double ref = r[i];
        double d = std::fabs(a[i] - ref);
        if (!(d == d)) d = 1e30;
        diff = std::max(diff, d);
        sc = std::max(sc, std::fabs(ref));
      }
      return diff / sc;
    };
    double eo = err(out, rout), el = err(lse, rlse), ed = err(dqkv, rd);
    // Again with every kernel's blocks in a shuffled order, as a GPU may run them: the results
    // must not change by a bit (no atomics, no block reading another's writes).
    const Run<float> again = run_case(c, qkv, dout, seed * 7919u);
    const size_t differ = bit_differences(out, again.out) + bit_differences(lse, again.lse) +
                          bit_differences(dqkv, again.dqkv);
    const bool bf16 = seed % 2 == 0;
    const size_t differ16 = bf16 ? sixteen_bit_differences<Bf16Bits>(c, qkv, dout)
                                 : sixteen_bit_differences<F16Bits>(c, qkv, dout);
    std::printf(
        "B%zu T%zu NH%zu NKV%zu D%zu %s: out %.2e lse %.2e dqkv %.2e; shuffled blocks: %zu of "
        "%zu elements differ in bits; %s instances against fp32 on the widened tensors: %zu "
        "differ\n",
        c.B, c.T, c.NH, c.NKV, c.D, c.grouped ? "grouped" : "q|k|v", eo, el, ed, differ,
        out.size() + lse.size() + dqkv.size(), bf16 ? "bf16" : "fp16", differ16);
    if (eo > kLimit || el > kLimit || ed > kLimit || differ != 0 || differ16 != 0) worst_fail = 1;
  }
  std::printf(worst_fail ? "FAIL\n" : "PASS\n");
  return worst_fail;
}
