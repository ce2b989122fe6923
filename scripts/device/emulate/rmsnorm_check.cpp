// The RMSNorm forward kernels of kernels/cuda/llama.cu run on the CPU under
// cuda_host_emulation.hpp: fused_residual_rmsnorm_forward_kernel must give the bits of the
// residual add followed by rmsnorm_forward_kernel (into fresh buffers, and in place with residual
// aliasing a), and both must match a double RMSNorm of a + b. C covers sizes below, at and past a
// warp and not multiples of it; N rows past a block's 8. Prints the bit differences and the max
// error relative to the output's largest value; exits 1 on any bit difference or an error past
// 1e-5. Built and run by emulate_layernorm.sh, which extracts the kernels into rmsnorm_body.inc.
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
#include "rmsnorm_body.inc"

struct Out {
  std::vector<float> residual, out, rstd;
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
  const Shape shapes[] = {{7, 48}, {33, 576}, {5, 13}, {16, 2048}, {1, 1}, {9, 100}, {17, 32}};
  const float eps = 1e-5f;
  int fail = 0;
  uint32_t seed = 1;
  for (const Shape& s : shapes) {
    const size_t n = s.N * s.C;
    std::mt19937 g(seed++);
    std::normal_distribution<float> na(0.5f, 2.0f), nb(-0.25f, 0.5f), nw(1.0f, 0.1f);
    std::vector<float> a(n), b(n), w(s.C);
    for (auto& x : a) x = na(g);
    for (auto& x : b) x = nb(g);
    for (auto& x : w) x = nw(g);
    const float nan = std::nanf("");
    auto fresh = [&] {
      return Out{std::vector<float>(n, nan), std::vector<float>(n, nan),
                 std::vector<float>(s.N, nan)};
    };
    const unsigned blocks = static_cast<unsigned>(ceil_div(s.N, kWarpsPerBlock));
    // Unfused: residual_forward_kernel's out[i] = a[i] + b[i], then the RMSNorm kernel.
    Out u = fresh();
    for (size_t i = 0; i < n; ++i) u.residual[i] = a[i] + b[i];
    emulate(blocks, kBlockSize, 0, [&] {
      rmsnorm_forward_kernel(u.out.data(), u.rstd.data(), u.residual.data(), w.data(), s.N, s.C,
                             eps);
    });
    Out f = fresh();
    emulate(blocks, kBlockSize, 0, [&] {
      fused_residual_rmsnorm_forward_kernel(f.residual.data(), f.out.data(), f.rstd.data(),
                                            a.data(), b.data(), w.data(), s.N, s.C, eps);
    });
    Out p = fresh();
    p.residual = a;  // in place: residual aliases a
    emulate(blocks, kBlockSize, 0, [&] {
      fused_residual_rmsnorm_forward_kernel(p.residual.data(), p.out.data(), p.rstd.data(),
                                            p.residual.data(), b.data(), w.data(), s.N, s.C, eps);
    });
    size_t differ = 0;
    for (const Out* o : {&f, &p})
      differ += bit_differences(o->residual, u.residual) + bit_differences(o->out, u.out) +
                bit_differences(o->rstd, u.rstd);
    // Double reference: RMSNorm of the exact sum.
    double err_out = 0, scale_out = 0, err_rstd = 0;
    for (size_t r = 0; r < s.N; ++r) {
      double sq = 0;
      for (size_t c = 0; c < s.C; ++c) {
        const double x = (double)a[r * s.C + c] + b[r * s.C + c];
        sq += x * x;
      }
      const double rs = 1.0 / std::sqrt(sq / s.C + eps);
      for (size_t c = 0; c < s.C; ++c) {
        const double y = w[c] * (((double)a[r * s.C + c] + b[r * s.C + c]) * rs);
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
    std::printf(
        "rmsnorm N%zu C%zu: fused vs unfused %zu of %zu elements differ in bits (fresh and in "
        "place); vs double: out %.2e, rstd %.2e\n",
        s.N, s.C, differ, 2 * (2 * n + s.N), err_out, err_rstd);
    if (differ != 0 || err_out > 1e-5 || err_rstd > 1e-5) fail = 1;
  }
  std::printf(fail ? "FAIL\n" : "PASS\n");
  return fail;
}
