// The norms' forward kernels of kernels/cuda/layernorm.cu and llama.cu run on the CPU under
// cuda_host_emulation.hpp: fused_residual_layernorm_forward_kernel and
// fused_residual_rmsnorm_forward_kernel must give the bits of the residual add followed by
// layernorm_forward_kernel / rmsnorm_forward_kernel (into fresh buffers, and in place with
// residual aliasing a), and match a double layernorm / RMSNorm of a + b. C covers sizes below, at
// and past a warp and not multiples of it; N rows past a block's 8. Prints the bit differences
// and the max error relative to each tensor's largest value; exits 1 on any bit difference or an
// error past 1e-5. The 16-bit instances (bf16 and fp16 parameters and output, the 16-bit norms of
// kernels.hpp) must give the bits of the fp32 kernels on the widened parameters with the output
// rounded, and the same statistics and residual. The backward's input kernels
// (layernorm_backward_input_kernel, rmsnorm_backward_input_kernel): the 16-bit instances must
// give the fp32 ones' dinp on the widened gain, bit for bit, and their optional 16-bit copy of
// dinp must be that dinp rounded. Built and run by emulate_layernorm.sh, which
// extracts the kernels into layernorm_body.inc and rmsnorm_body.inc.
#include <algorithm>
#include <cstring>
#include <random>
#include <string>
#include "cuda_host_emulation.hpp"
#include "storage16.cuh"
// The kernels' 16-bit element types and their conversions, as the .cu files see them.
using namespace tierzero::kernels::cuda_impl;

constexpr int kBlockSize = 256;  // cuda_common.cuh's
constexpr int kWarpsPerBlock = kBlockSize / kWarpSize;
inline float rsqrtf(
    float x) {  // the GPU's is approximate; the check compares kernels to each other
  return 1.0f / std::sqrt(x);
}
#include "layernorm_body.inc"
#include "rmsnorm_body.inc"

namespace {

struct Shape {
  size_t N, C;
};
struct Inputs {
  std::vector<float> a, b, w, bias;  // (N, C), (N, C), (C), (C)
};
// One kernel's outputs: the sum, the normalised rows and the per-row statistics (RMSNorm has no
// mean: left empty).
struct Out {
  std::vector<float> residual, out, mean, rstd;
};

const float kNan = std::nanf("");

Out fresh(const Shape& s, bool with_mean) {
  const size_t n = s.N * s.C;
  return Out{std::vector<float>(n, kNan), std::vector<float>(n, kNan),
             std::vector<float>(with_mean ? s.N : 0, kNan), std::vector<float>(s.N, kNan)};
}

unsigned blocks_of(const Shape& s) {
  return static_cast<unsigned>(ceil_div(s.N, kWarpsPerBlock));
}

// The unfused run (residual_forward_kernel's out[i] = a[i] + b[i], then `norm`), the fused one into
// fresh buffers and in place; returns the elements whose bits differ from the unfused run, and
// the fused outputs in *fused.
template <typename Norm, typename Fused>
size_t fused_vs_unfused(const Shape& s, const Inputs& in, bool with_mean, Norm norm, Fused fused,
                        Out* fused_out) {
  const size_t n = s.N * s.C;
  Out u = fresh(s, with_mean);
  for (size_t i = 0; i < n; ++i) u.residual[i] = in.a[i] + in.b[i];
  emulate(blocks_of(s), kBlockSize, 0, [&] { norm(u); });
  Out f = fresh(s, with_mean);
  emulate(blocks_of(s), kBlockSize, 0, [&] { fused(f, in.a.data()); });
  Out p = fresh(s, with_mean);
  p.residual = in.a;  // in place: residual aliases a
  emulate(blocks_of(s), kBlockSize, 0, [&] { fused(p, p.residual.data()); });
  size_t differ = 0;
  for (const Out* o : {&f, &p})
    differ += bit_differences(o->residual, u.residual) + bit_differences(o->out, u.out) +
              bit_differences(o->mean, u.mean) + bit_differences(o->rstd, u.rstd);
  *fused_out = std::move(f);
  return differ;
}

double sum_at(const Inputs& in, size_t i) {
  return static_cast<double>(in.a[i]) + in.b[i];
}

bool check_layernorm(const Shape& s, const Inputs& in) {
  const float *w = in.w.data(), *bias = in.bias.data();
  Out f;
  const size_t differ = fused_vs_unfused(
      s, in, true,
      [&](Out& o) {
        layernorm_forward_kernel(o.out.data(), o.mean.data(), o.rstd.data(), o.residual.data(), w,
                                 bias, s.N, s.C);
      },
      [&](Out& o, const float* a) {
        fused_residual_layernorm_forward_kernel(o.residual.data(), o.out.data(), o.mean.data(),
                                                o.rstd.data(), a, in.b.data(), w, bias, s.N, s.C);
      },
      &f);
  // Double reference: layernorm of the exact sum, biased variance, eps 1e-5.
  double err_out = 0, scale_out = 0, err_stats = 0;
  for (size_t r = 0; r < s.N; ++r) {
    double m = 0, v = 0;
    for (size_t c = 0; c < s.C; ++c) m += sum_at(in, r * s.C + c);
    m /= s.C;
    for (size_t c = 0; c < s.C; ++c)
      v += (sum_at(in, r * s.C + c) - m) * (sum_at(in, r * s.C + c) - m);
    const double rs = 1.0 / std::sqrt(v / s.C + 1e-5);
    for (size_t c = 0; c < s.C; ++c) {
      const double y = (sum_at(in, r * s.C + c) - m) * rs * w[c] + bias[c];
      double e = std::fabs(f.out[r * s.C + c] - y);
      if (!(e == e)) e = 1e30;
      err_out = std::max(err_out, e);
      scale_out = std::max(scale_out, std::fabs(y));
    }
    double em = std::fabs(f.mean[r] - m) / std::max(std::fabs(m), 1e-30);
    double er = std::fabs(f.rstd[r] - rs) / rs;
    if (!(em == em) || !(er == er)) em = 1e30;
    err_stats = std::max({err_stats, em, er});
  }
  err_out /= scale_out;
  const size_t n = s.N * s.C;
  std::printf(
      "layernorm N%zu C%zu: fused vs unfused %zu of %zu elements differ in bits (fresh and in "
      "place); vs double: out %.2e, mean/rstd %.2e\n",
      s.N, s.C, differ, 2 * (2 * n + 2 * s.N), err_out, err_stats);
  return differ == 0 && err_out <= 1e-5 && err_stats <= 1e-5;
}

bool check_rmsnorm(const Shape& s, const Inputs& in) {
  const float eps = 1e-5f;
  const float* w = in.w.data();
  Out f;
  const size_t differ = fused_vs_unfused(
      s, in, false,
      [&](Out& o) {
        rmsnorm_forward_kernel(o.out.data(), o.rstd.data(), o.residual.data(), w, s.N, s.C, eps);
      },
      [&](Out& o, const float* a) {
        fused_residual_rmsnorm_forward_kernel(o.residual.data(), o.out.data(), o.rstd.data(), a,
                                              in.b.data(), w, s.N, s.C, eps);
      },
      &f);
  // Double reference: RMSNorm of the exact sum.
  double err_out = 0, scale_out = 0, err_rstd = 0;
  for (size_t r = 0; r < s.N; ++r) {
    double sq = 0;
    for (size_t c = 0; c < s.C; ++c) sq += sum_at(in, r * s.C + c) * sum_at(in, r * s.C + c);
    const double rs = 1.0 / std::sqrt(sq / s.C + eps);
    for (size_t c = 0; c < s.C; ++c) {
      const double y = w[c] * (sum_at(in, r * s.C + c) * rs);
      double e = std::fabs(f.out[r * s.C + c] - y);
      if (!(e == e)) e = 1e30;
      err_out = std::max(err_out, e);
      scale_out = std::max(scale_out, std::fabs(y));
    }
    double er = std::fabs(f.rstd[r] - rs) / rs;
    if (!(er == er)) er = 1e30;
    err_rstd = std::max(err_rstd, er);
  }
  err_out /= scale_out;
  const size_t n = s.N * s.C;
  std::printf(
      "rmsnorm N%zu C%zu: fused vs unfused %zu of %zu elements differ in bits (fresh and in "
      "place); vs double: out %.2e, rstd %.2e\n",
      s.N, s.C, differ, 2 * (2 * n + s.N), err_out, err_rstd);
  return differ == 0 && err_out <= 1e-5 && err_rstd <= 1e-5;
}

// The 16-bit instances of the four forward kernels against the fp32 ones on the widened
// parameters: the output rounded once, everything else the same bits.
template <typename T>
bool check_16bit(const char* type, const Shape& s, const Inputs& in) {
  const size_t n = s.N * s.C;
  std::vector<T> w16(s.C), bias16(s.C);
  std::vector<float> w(s.C), bias(s.C);  // (C) the widened values
  for (size_t c = 0; c < s.C; ++c) {
    w16[c] = from_f32<T>(in.w[c]);
    bias16[c] = from_f32<T>(in.bias[c]);
    w[c] = to_f32(w16[c]);
    bias[c] = to_f32(bias16[c]);
  }
  // The fp32 outputs rounded, as bits, for comparison with the 16-bit kernels' outputs.
  const auto rounded = [](const std::vector<float>& x) {
    std::vector<float> r(x.size());
    for (size_t i = 0; i < x.size(); ++i) r[i] = to_f32(from_f32<T>(x[i]));
    return r;
  };
  const auto widened = [](const std::vector<T>& x) {
    std::vector<float> r(x.size());
    for (size_t i = 0; i < x.size(); ++i) r[i] = to_f32(x[i]);
    return r;
  };
  size_t differ = 0;
  const unsigned blocks = blocks_of(s);
  // LayerNorm of a, and fused of a + b; then RMSNorm of both.
  for (int norm = 0; norm < 2; ++norm)
    for (int fused = 0; fused < 2; ++fused) {
      Out o32 = fresh(s, norm == 0), o16 = fresh(s, norm == 0);
      std::vector<T> out16(n, from_f32<T>(kNan));
      const float eps = 1e-5f;
      emulate(blocks, kBlockSize, 0, [&] {
        if (norm == 0 && fused == 0) {
          layernorm_forward_kernel(o32.out.data(), o32.mean.data(), o32.rstd.data(), in.a.data(),
                                   w.data(), bias.data(), s.N, s.C);
        } else if (norm == 0) {
          fused_residual_layernorm_forward_kernel(o32.residual.data(), o32.out.data(),
                                                  o32.mean.data(), o32.rstd.data(), in.a.data(),
                                                  in.b.data(), w.data(), bias.data(), s.N, s.C);
        } else if (fused == 0) {
          rmsnorm_forward_kernel(o32.out.data(), o32.rstd.data(), in.a.data(), w.data(), s.N, s.C,
                                 eps);
        } else {
          fused_residual_rmsnorm_forward_kernel(o32.residual.data(), o32.out.data(),
                                                o32.rstd.data(), in.a.data(), in.b.data(), w.data(),
                                                s.N, s.C, eps);
        }
      });
      emulate(blocks, kBlockSize, 0, [&] {
        if (norm == 0 && fused == 0) {
          layernorm_forward_kernel(out16.data(), o16.mean.data(), o16.rstd.data(), in.a.data(),
                                   w16.data(), bias16.data(), s.N, s.C);
        } else if (norm == 0) {
          fused_residual_layernorm_forward_kernel(o16.residual.data(), out16.data(),
                                                  o16.mean.data(), o16.rstd.data(), in.a.data(),
                                                  in.b.data(), w16.data(), bias16.data(), s.N, s.C);
        } else if (fused == 0) {
          rmsnorm_forward_kernel(out16.data(), o16.rstd.data(), in.a.data(), w16.data(), s.N, s.C,
                                 eps);
        } else {
          fused_residual_rmsnorm_forward_kernel(o16.residual.data(), out16.data(), o16.rstd.data(),
                                                in.a.data(), in.b.data(), w16.data(), s.N, s.C,
                                                eps);
        }
      });
      differ += bit_differences(widened(out16), rounded(o32.out)) +
                bit_differences(o16.mean, o32.mean) + bit_differences(o16.rstd, o32.rstd);
      if (fused == 1) differ += bit_differences(o16.residual, o32.residual);
    }
  std::printf(
      "%s norms N%zu C%zu: layernorm, rmsnorm, plain and fused, against fp32 on the widened "
      "parameters, output rounded: %zu elements differ in bits\n",
      type, s.N, s.C, differ);
  return differ == 0;
}

// The backward's input kernels, dinp += f(dout, inp, gain) with a prior dinp, in 16 bits (the
// gain 16-bit; with and without the 16-bit copy of dinp) against fp32 on the widened gain.
template <typename T>
bool check_backward16(const char* type, const Shape& s, const Inputs& in) {
  const size_t n = s.N * s.C;
  std::vector<T> w16(s.C);
  std::vector<float> w(s.C);  // (C) widened
  for (size_t c = 0; c < s.C; ++c) {
    w16[c] = from_f32<T>(in.w[c]);
    w[c] = to_f32(w16[c]);
  }
  // The statistics of a (the forward's), dout b, the prior dinp a + b.
  Out stats = fresh(s, true);
  std::vector<float> unused(n);
  emulate(blocks_of(s), kBlockSize, 0, [&] {
    layernorm_forward_kernel(unused.data(), stats.mean.data(), stats.rstd.data(), in.a.data(),
                             w.data(), in.bias.data(), s.N, s.C);
  });
  std::vector<float> prior(n);
  for (size_t i = 0; i < n; ++i) prior[i] = in.a[i] + in.b[i];
  size_t differ = 0;
  for (int norm = 0; norm < 2; ++norm) {
    std::vector<float> d32 = prior, d16 = prior, d16_copy = prior;
    std::vector<T> copy(n, from_f32<T>(kNan));
    T* none = nullptr;
    const auto run = [&](float* dinp, auto* dinp16, const auto* gain) {
      emulate(blocks_of(s), kBlockSize, 0, [&] {
        if (norm == 0)
          layernorm_backward_input_kernel(dinp, dinp16, in.b.data(), in.a.data(), gain,
                                          stats.mean.data(), stats.rstd.data(), s.N, s.C);
        else
          rmsnorm_backward_input_kernel(dinp, dinp16, in.b.data(), in.a.data(), gain,
                                        stats.rstd.data(), s.N, s.C);
      });
    };
    run(d32.data(), static_cast<float*>(nullptr), w.data());
    run(d16.data(), none, w16.data());
    run(d16_copy.data(), copy.data(), w16.data());
    std::vector<float> rounded(n), widened_copy(n);
    for (size_t i = 0; i < n; ++i) {
      rounded[i] = to_f32(from_f32<T>(d32[i]));
      widened_copy[i] = to_f32(copy[i]);
    }
    differ += bit_differences(d16, d32) + bit_differences(d16_copy, d32) +
              bit_differences(widened_copy, rounded);
  }
  std::printf(
      "%s norms' backward N%zu C%zu: dinp against fp32 on the widened gain and its 16-bit copy "
      "against dinp rounded: %zu elements differ in bits\n",
      type, s.N, s.C, differ);
  return differ == 0;
}

}  // namespace

int main() {
  const Shape shapes[] = {{7, 48},  {33, 768}, {5, 13},   {16, 1600}, {1, 1},
                          {9, 100}, {17, 32},  {6, 2048}, {33, 576}};
  bool ok = true;
  uint32_t seed = 1;
  for (const Shape& s : shapes) {
    std::mt19937 g(seed++);
    std::normal_distribution<float> na(3.0f, 2.0f), nb(-0.25f, 0.5f), nw(1.0f, 0.1f),
        nbias(0.0f, 0.1f);
    Inputs in{std::vector<float>(s.N * s.C), std::vector<float>(s.N * s.C), std::vector<float>(s.C),
              std::vector<float>(s.C)};
    for (auto& x : in.a) x = na(g);
    for (auto& x : in.b) x = nb(g);
    for (auto& x : in.w) x = nw(g);
    for (auto& x : in.bias) x = nbias(g);
    ok &= check_layernorm(s, in);
    ok &= check_rmsnorm(s, in);
    ok &= check_16bit<Bf16Bits>("bf16", s, in);
    ok &= check_16bit<F16Bits>("fp16", s, in);
    ok &= check_backward16<Bf16Bits>("bf16", s, in);
    ok &= check_backward16<F16Bits>("fp16", s, in);
  }
  std::printf(ok ? "PASS\n" : "FAIL\n");
  return ok ? 0 : 1;
}
