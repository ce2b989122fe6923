// The forward kernels of kernels/cuda/layernorm.cu run on the CPU under cuda_host_emulation.hpp:
// fused_residual_layernorm_forward_kernel must give the bits of the residual add followed by
// layernorm_forward_kernel (into fresh buffers, and in place with residual aliasing a), and both
// must match a double layernorm of a + b. C covers sizes below, at and past a warp and not
// multiples of it; N rows past a block's 8. Prints the bit differences and the max error relative
// to each tensor's largest value; exits 1 on any bit difference or an error past 1e-5. Built and
// run by emulate_layernorm.sh, which extracts the kernels into layernorm_body.inc.
#include <algorithm>
#include <cstring>
#include <random>
#include <string>
#include "cuda_host_emulation.hpp"

constexpr int kBlockSize = 256;  // cuda_common.cuh's
constexpr int kWarpsPerBlock = kBlockSize / kWarpSize;
inline float rsqrtf(
    float x) {  // the GPU's is approximate; the check compares kernels to each other
  return 1.0f / std::sqrt(x);
}
#include "layernorm_body.inc"

struct Out {
  std::vector<float> residual, out, mean, rstd;
};

size_t bit_differences(const std::vector<float>& a, const std::vector<float>& b) {
  size_t n = 0;
  for (size_t i = 0; i < a.size(); ++i) n += std::memcmp(&a[i], &b[i], sizeof(float)) != 0;
  return n;
}

int main() {
  struct Shape {
    size_t N, C;
  };
  const Shape shapes[] = {{7, 48}, {33, 768}, {5, 13}, {16, 1600}, {1, 1}, {9, 100}, {17, 32}};
  int fail = 0;
  uint32_t seed = 1;
  for (const Shape& s : shapes) {
    const size_t n = s.N * s.C;
    std::mt19937 g(seed++);
    std::normal_distribution<float> na(3.0f, 2.0f), nb(-0.25f, 0.5f), nw(1.0f, 0.1f),
        nbias(0.0f, 0.1f);
    std::vector<float> a(n), b(n), w(s.C), bias(s.C);
    for (auto& x : a) x = na(g);
    for (auto& x : b) x = nb(g);
    for (auto& x : w) x = nw(g);
    for (auto& x : bias) x = nbias(g);
    const float nan = std::nanf("");
    auto fresh = [&] {
      return Out{std::vector<float>(n, nan), std::vector<float>(n, nan),
                 std::vector<float>(s.N, nan), std::vector<float>(s.N, nan)};
    };
    const unsigned blocks = static_cast<unsigned>(ceil_div(s.N, kWarpsPerBlock));
    // Unfused: residual_forward_kernel's out[i] = a[i] + b[i], then the layernorm kernel.
    Out u = fresh();
    for (size_t i = 0; i < n; ++i) u.residual[i] = a[i] + b[i];
    emulate(blocks, kBlockSize, 0, [&] {
      layernorm_forward_kernel(u.out.data(), u.mean.data(), u.rstd.data(), u.residual.data(),
                               w.data(), bias.data(), s.N, s.C);
    });
    Out f = fresh();
    emulate(blocks, kBlockSize, 0, [&] {
      fused_residual_layernorm_forward_kernel(f.residual.data(), f.out.data(), f.mean.data(),
                                              f.rstd.data(), a.data(), b.data(), w.data(),
                                              bias.data(), s.N, s.C);
    });
    Out p = fresh();
    p.residual = a;  // in place: residual aliases a
    emulate(blocks, kBlockSize, 0, [&] {
      fused_residual_layernorm_forward_kernel(p.residual.data(), p.out.data(), p.mean.data(),
                                              p.rstd.data(), p.residual.data(), b.data(), w.data(),
                                              bias.data(), s.N, s.C);
    });
    size_t differ = 0;
    for (const Out* o : {&f, &p})
      differ += bit_differences(o->residual, u.residual) + bit_differences(o->out, u.out) +
                bit_differences(o->mean, u.mean) + bit_differences(o->rstd, u.rstd);
    // Double reference: layernorm of the exact sum, biased variance, eps 1e-5.
    double err_out = 0, scale_out = 0, err_stats = 0;
    for (size_t r = 0; r < s.N; ++r) {
      double m = 0, v = 0;
      for (size_t c = 0; c < s.C; ++c) m += (double)a[r * s.C + c] + b[r * s.C + c];
      m /= s.C;
      for (size_t c = 0; c < s.C; ++c) {
        const double d = (double)a[r * s.C + c] + b[r * s.C + c] - m;
        v += d * d;
      }
      const double rs = 1.0 / std::sqrt(v / s.C + 1e-5);
      for (size_t c = 0; c < s.C; ++c) {
        const double x = (double)a[r * s.C + c] + b[r * s.C + c];
        const double y = (x - m) * rs * w[c] + bias[c];
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
    std::printf(
        "N%zu C%zu: fused vs unfused %zu of %zu elements differ in bits (fresh and in "
        "place); vs double: out %.2e, mean/rstd %.2e\n",
        s.N, s.C, differ, 2 * (2 * n + 2 * s.N), err_out, err_stats);
    if (differ != 0 || err_out > 1e-5 || err_stats > 1e-5) fail = 1;
  }
  std::printf(fail ? "FAIL\n" : "PASS\n");
  return fail;
}
