// Element-wise CPU kernels: GELU, residual add, scale, the sum of squares (gradient norm), and
// the block transpose Ulysses packs its all-to-all with.
// Each is one OpenMP-parallel, vectorised pass; they are memory-bound, so none makes a second pass
// over its data. This file is built without multiply-add contraction (kernels/CMakeLists.txt):
// with it, GCC rounded a vector body and its scalar tail differently, so an element's bits
// depended on the thread split, and gelu_backward_in_place (the fused GELU product's epilogue)
// stopped giving gelu_backward's bits into zeros (ElementwiseCpu.GeluBackwardBitsDoNotDepend...).
#include <cstring>

#include "cpu/vec_math.hpp"
#include "tierzero/kernels/cpu_ops.hpp"

namespace tierzero::kernels::cpu {

namespace {

constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr float kGeluCube = 0.044715f;

// 1 - tanh(u) = 2 / (e^{2u} + 1) and 1 + tanh(u) = e^{2u} (1 - tanh(u)): both without the
// cancellation of 1 +- tanhf(u), so GELU keeps full relative precision in its negative tail, and
// sech^2(u) = (1 - tanh(u)) (1 + tanh(u)) does too. exp_approx saturates, so neither overflows.
struct TanhTerms {
  float one_minus;
  float one_plus;
};
inline TanhTerms tanh_terms(float u) {
  const float e = exp_approx(2.0f * u);
  const float one_minus = 2.0f / (e + 1.0f);
  return {one_minus, e * one_minus};
}

// d gelu(x) / dx, the tanh form's derivative, with sech^2 = (1 - tanh)(1 + tanh).
inline float gelu_grad(float x) {
  const TanhTerms th = tanh_terms(kGeluScale * (x + kGeluCube * x * x * x));
  const float sech2 = th.one_minus * th.one_plus;
  return 0.5f * th.one_plus + 0.5f * x * sech2 * kGeluScale * (1.0f + 3.0f * kGeluCube * x * x);
}

}  // namespace

void gelu_forward(float* out, const float* inp, size_t n) {  // out (n), inp (n)
#pragma omp parallel for simd schedule(static)
  for (size_t i = 0; i < n; ++i) {
    const float x = inp[i];
    const TanhTerms th = tanh_terms(kGeluScale * (x + kGeluCube * x * x * x));
    out[i] = 0.5f * x * th.one_plus;
  }
}

void gelu_backward(float* dinp,        // (n) +=
                   const float* inp,   // (n)
                   const float* dout,  // (n)
                   size_t n) {
#pragma omp parallel for simd schedule(static)
  for (size_t i = 0; i < n; ++i) dinp[i] += gelu_grad(inp[i]) * dout[i];
}

void gelu_backward_in_place(float* d,          // (n)
                            const float* inp,  // (n)
                            size_t n) {
  // 0 + g * d, not g * d: gelu_backward into a zeroed buffer turns a -0 product into +0.
#pragma omp parallel for simd schedule(static)
  for (size_t i = 0; i < n; ++i) d[i] = 0.0f + gelu_grad(inp[i]) * d[i];
}

void residual_forward(float* out, const float* a, const float* b, size_t n) {  // all (n)
#pragma omp parallel for simd schedule(static)
  for (size_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}

void residual_backward(float* da,          // (n) +=
                       float* db,          // (n) +=
                       const float* dout,  // (n)
                       size_t n) {
#pragma omp parallel for simd schedule(static)
  for (size_t i = 0; i < n; ++i) {
    da[i] += dout[i];
    db[i] += dout[i];
  }
}

double sum_squares(const float* x, size_t n) {  // x (n)
  double sum = 0.0;
#pragma omp parallel for simd schedule(static) reduction(+ : sum)
  for (size_t i = 0; i < n; ++i) {
    const double xi = static_cast<double>(x[i]);
    sum += xi * xi;
  }
  return sum;
}

void scale(float* x, size_t n, float s) {  // x (n)
#pragma omp parallel for simd schedule(static)
  for (size_t i = 0; i < n; ++i) x[i] *= s;
}

void transpose_blocks(void* out, const void* in, size_t X, size_t Y, size_t row_bytes) {
  // out (Y, X, row_bytes), in (X, Y, row_bytes): whole rows move, so each is one memcpy.
  auto* o = static_cast<char*>(out);
  const auto* i = static_cast<const char*>(in);
#pragma omp parallel for collapse(2) schedule(static)
  for (size_t x = 0; x < X; ++x)
    for (size_t y = 0; y < Y; ++y)
      std::memcpy(o + (y * X + x) * row_bytes, i + (x * Y + y) * row_bytes, row_bytes);
}

}  // namespace tierzero::kernels::cpu
