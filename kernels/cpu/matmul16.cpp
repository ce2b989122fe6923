// The 16-bit linears (Kernels::matmul16_*) on the CPU: the reference form of 16-bit training's
// products. Each widens its 16-bit operands to fp32, runs the fp32 kernel of matmul.cpp (and
// GELU's of elementwise.cpp) and rounds what is stored in 16 bits once, at the end, from the fp32
// result: the bits of the fp32 ops on the widened values, which is what the tests hold CUDA's
// tensor-core products to within their precision. The widened copies are transient host memory of
// the call (the CPU has no tensor cores to feed, and OpenBLAS in Debian has no bf16 product).
#include <cstddef>
#include <vector>

#include "cpu/storage16.hpp"
#include "tierzero/core/dtype.hpp"
#include "tierzero/kernels/cpu_ops.hpp"

namespace tierzero::kernels::cpu {

namespace {

// Where an fp32 result is computed before it is stored as `type`: the destination itself when it
// is fp32, else a scratch rounded into it by store().
class Fp32Result {
 public:
  Fp32Result(void* dst, DType type, size_t n)
      : dst_(dst), type_(type), n_(n), scratch_(dst != nullptr && type != DType::f32 ? n : 0) {}
  float* f32() {
    if (dst_ == nullptr) return nullptr;
    return type_ == DType::f32 ? static_cast<float*>(dst_) : scratch_.data();
  }
  void store() {
    if (dst_ != nullptr && type_ != DType::f32)
      tierzero::convert_from_f32(dst_, type_, scratch_.data(), n_);
  }

 private:
  void* dst_;
  DType type_;
  size_t n_;
  std::vector<float> scratch_;  // (n) when type is 16-bit
};

const float* or_null(const std::vector<float>& x) {
  return x.empty() ? nullptr : x.data();
}

// A forward's operands widened, and their fp32 product with the bias.
struct WidenedForward {
  std::vector<float> inp, weight, bias;  // (N, IC), (OC, IC), (OC) or empty
  WidenedForward(const void* i, const void* w, const void* b, DType type, size_t N, size_t IC,
                 size_t OC)
      : inp(widened(i, type, N * IC)),
        weight(widened(w, type, OC * IC)),
        bias(widened(b, type, OC)) {}
  void product(float* out, size_t N, size_t IC, size_t OC) const {  // out (N, OC)
    matmul_forward(out, inp.data(), weight.data(), or_null(bias), N, IC, OC);
  }
};

}  // namespace

void matmul16_forward(void* out, DType out_type, const void* inp, const void* weight,
                      const void* bias, DType type, size_t N, size_t IC, size_t OC) {
  check_16bit_types("matmul16_forward", type, out_type);
  Fp32Result result(out, out_type, N * OC);  // (N, OC)
  WidenedForward(inp, weight, bias, type, N, IC, OC).product(result.f32(), N, IC, OC);
  result.store();
}

void matmul16_backward(void* dinp, DType dinp_type, float* dweight, float* dbias, const void* dout,
                       const void* inp, const void* weight, DType type, size_t N, size_t IC,
                       size_t OC, GradWrite dinp_write) {
  check_16bit_types("matmul16_backward", type, dinp_type, dinp_write);
  const std::vector<float> dout32 = widened(dout, type, N * OC);  // (N, OC)
  const std::vector<float> inp32 = widened(dweight != nullptr ? inp : nullptr, type, N * IC);
  const std::vector<float> weight32 = widened(dinp != nullptr ? weight : nullptr, type, OC * IC);
  Fp32Result dinp32(dinp, dinp_type, N * IC);  // (N, IC)
  matmul_backward(dinp32.f32(), dweight, dbias, dout32.data(), or_null(inp32), or_null(weight32), N,
                  IC, OC, dinp_write);
  dinp32.store();
}

void matmul16_gelu_forward(void* out, void* pre, const void* inp, const void* weight,
                           const void* bias, DType type, size_t N, size_t IC, size_t OC) {
  check_16bit_types("matmul16_gelu_forward", type, type);
  Fp32Result pre32(pre, type, N * OC);  // (N, OC)
  Fp32Result out32(out, type, N * OC);  // (N, OC)
  WidenedForward(inp, weight, bias, type, N, IC, OC).product(pre32.f32(), N, IC, OC);
  gelu_forward(out32.f32(), pre32.f32(), N * OC);  // from pre's fp32 value, as the epilogue
  pre32.store();
  out32.store();
}

void matmul16_backward_gelu(void* dpre, float* dweight, float* dbias, const void* dout,
                            const void* inp, const void* pre, const void* weight, DType type,
                            size_t N, size_t IC, size_t OC) {
  check_16bit_types("matmul16_backward_gelu", type, type);
  const std::vector<float> dout32 = widened(dout, type, N * OC);  // (N, OC)
  const std::vector<float> inp32 = widened(dweight != nullptr ? inp : nullptr, type, N * IC);
  const std::vector<float> pre32 = widened(pre, type, N * IC);         // (N, IC)
  const std::vector<float> weight32 = widened(weight, type, OC * IC);  // (OC, IC)
  Fp32Result dpre32(dpre, type, N * IC);                               // (N, IC)
  matmul_backward(dpre32.f32(), dweight, dbias, dout32.data(), or_null(inp32), weight32.data(), N,
                  IC, OC, GradWrite::overwrite);
  gelu_backward_in_place(dpre32.f32(), pre32.data(), N * IC);
  dpre32.store();
}

}  // namespace tierzero::kernels::cpu
