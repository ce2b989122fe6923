// CpuKernels: the CPU backend of tierzero::kernels::Kernels, returned by make_cpu_kernels().
// It only forwards to the free functions of cpu_ops.hpp, so that the CPU optimizer offload path
// and the layers share one implementation. The CPU has no streams and no workspace: calls finish
// before they return.
#include <memory>
#include <string>
#include <vector>

#include "tierzero/core/error.hpp"
#include "tierzero/kernels/cpu_ops.hpp"
#include "tierzero/kernels/kernels.hpp"

namespace tierzero::kernels {

namespace {

class CpuKernels final : public Kernels {
 public:
  const char* backend_name() const override { return "cpu"; }
  void set_stream(void*) override {}
  void* stream() const override { return nullptr; }
  size_t workspace_bytes() const override { return 0; }
  void set_workspace(void*, size_t) override {}

  void encoder_forward(float* out, const int32_t* tokens, const float* wte, const float* wpe,
                       size_t B, size_t T, size_t C) override {
    cpu::encoder_forward(out, tokens, wte, wpe, B, T, C);
  }
  void encoder_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens,
                        size_t B, size_t T, size_t C) override {
    cpu::encoder_backward(dwte, dwpe, dout, tokens, B, T, C);
  }

  void layernorm_forward(float* out, float* mean, float* rstd, const float* inp,
                         const float* weight, const float* bias, size_t N, size_t C) override {
    cpu::layernorm_forward(out, mean, rstd, inp, weight, bias, N, C);
  }
  void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                          const float* inp, const float* weight, const float* mean,
                          const float* rstd, size_t N, size_t C) override {
    cpu::layernorm_backward(dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C);
  }
  void fused_residual_layernorm_forward(float* residual, float* out, float* mean, float* rstd,
                                        const float* a, const float* b, const float* weight,
                                        const float* bias, size_t N, size_t C) override {
    cpu::fused_residual_layernorm_forward(residual, out, mean, rstd, a, b, weight, bias, N, C);
  }

  void layernorm16_forward(void* out, float* mean, float* rstd, const float* inp,
                           const void* weight, const void* bias, DType type, size_t N,
                           size_t C) override {
    cpu::layernorm16_forward(out, mean, rstd, inp, weight, bias, type, N, C);
  }
  void fused_residual_layernorm16_forward(float* residual, void* out, float* mean, float* rstd,
                                          const float* a, const float* b, const void* weight,
                                          const void* bias, DType type, size_t N,
                                          size_t C) override {
    cpu::fused_residual_layernorm16_forward(residual, out, mean, rstd, a, b, weight, bias, type, N,
                                            C);
  }
  void layernorm16_backward(float* dinp, void* dinp16, float* dweight, float* dbias,
                            const float* dout, const float* inp, const void* weight,
                            const float* mean, const float* rstd, DType type, size_t N,
                            size_t C) override {
    cpu::layernorm16_backward(dinp, dinp16, dweight, dbias, dout, inp, weight, mean, rstd, type, N,
                              C);
  }
  void rmsnorm16_forward(void* out, float* rstd, const float* inp, const void* weight, DType type,
                         size_t N, size_t C, float eps) override {
    cpu::rmsnorm16_forward(out, rstd, inp, weight, type, N, C, eps);
  }
  void fused_residual_rmsnorm16_forward(float* residual, void* out, float* rstd, const float* a,
                                        const float* b, const void* weight, DType type, size_t N,
                                        size_t C, float eps) override {
    cpu::fused_residual_rmsnorm16_forward(residual, out, rstd, a, b, weight, type, N, C, eps);
  }
  void rmsnorm16_backward(float* dinp, void* dinp16, float* dweight, const float* dout,
                          const float* inp, const void* weight, const float* rstd, DType type,
                          size_t N, size_t C) override {
    cpu::rmsnorm16_backward(dinp, dinp16, dweight, dout, inp, weight, rstd, type, N, C);
  }

  // The CPU computes every product in fp32 whatever is asked (kernels.hpp): a setting meant for
  // a GPU's tensor cores leaves the CPU's results as they were.
  void set_matmul_precision(MatmulPrecision) override {}
  MatmulPrecision matmul_precision() const override { return MatmulPrecision::fp32; }

  void matmul_forward(float* out, const float* inp, const float* weight, const float* bias,
                      size_t N, size_t IC, size_t OC) override {
    cpu::matmul_forward(out, inp, weight, bias, N, IC, OC);
  }
  void matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                       const float* inp, const float* weight, size_t N, size_t IC, size_t OC,
                       GradWrite dinp_write) override {
    cpu::matmul_backward(dinp, dweight, dbias, dout, inp, weight, N, IC, OC, dinp_write);
  }

  void gemm_16bit(float* c, const void* a, const void* b, DType type, size_t m, size_t n,
                  size_t k) override {
    TZ_CHECK(type == DType::bf16 || type == DType::f16,
             std::string("gemm_16bit: operands of type ") + dtype_name(type),
             "pass bf16 or fp16 operands");
    std::vector<float> a32(m * k), b32(n * k);  // (m, k), (n, k) widened
    tierzero::convert_to_f32(a32.data(), a, type, a32.size());
    tierzero::convert_to_f32(b32.data(), b, type, b32.size());
    cpu::matmul_forward(c, a32.data(), b32.data(), nullptr, m, k, n);
  }
  void matmul16_forward(void* out, DType out_type, const void* inp, const void* weight,
                        const void* bias, DType type, size_t N, size_t IC, size_t OC) override {
    cpu::matmul16_forward(out, out_type, inp, weight, bias, type, N, IC, OC);
  }
  void matmul16_backward(void* dinp, DType dinp_type, float* dweight, float* dbias,
                         const void* dout, const void* inp, const void* weight, DType type,
                         size_t N, size_t IC, size_t OC, GradWrite dinp_write) override {
    cpu::matmul16_backward(dinp, dinp_type, dweight, dbias, dout, inp, weight, type, N, IC, OC,
                           dinp_write);
  }
  void matmul16_gelu_forward(void* out, void* pre, const void* inp, const void* weight,
                             const void* bias, DType type, size_t N, size_t IC,
                             size_t OC) override {
    cpu::matmul16_gelu_forward(out, pre, inp, weight, bias, type, N, IC, OC);
  }
  void matmul16_backward_gelu(void* dpre, float* dweight, float* dbias, const void* dout,
                              const void* inp, const void* pre, const void* weight, DType type,
                              size_t N, size_t IC, size_t OC) override {
    cpu::matmul16_backward_gelu(dpre, dweight, dbias, dout, inp, pre, weight, type, N, IC, OC);
  }
  void matmul_gelu_forward(float* out, float* pre, const float* inp, const float* weight,
                           const float* bias, size_t N, size_t IC, size_t OC) override {
    matmul_forward(pre, inp, weight, bias, N, IC, OC);
    cpu::gelu_forward(out, pre, N * OC);
  }
  void matmul_backward_gelu(float* dpre, float* dweight, float* dbias, const float* dout,
                            const float* inp, const float* pre, const float* weight, size_t N,
                            size_t IC, size_t OC) override {
    matmul_backward(dpre, dweight, dbias, dout, inp, weight, N, IC, OC, GradWrite::overwrite);
    cpu::gelu_backward_in_place(dpre, pre, N * IC);
  }

  size_t attention_saved_floats(const AttentionShape& s) const override {
    return s.B * s.n_head * s.T;  // the rows' logsumexp
  }
  size_t attention_scratch_floats(const AttentionShape&) const override { return 0; }
  void attention_forward(float* out, float* saved, const float* qkv,
                         const AttentionShape& s) override {
    cpu::flash_attention_forward(out, saved, qkv, s);
  }
  void attention_backward(float* dqkv, float*, const float* dout, const float* out,
                          const float* qkv, const float* saved, const AttentionShape& s) override {
    cpu::flash_attention_backward(dqkv, dout, out, qkv, saved, s);
  }

  void attention16_forward(void* out, float* saved, const void* qkv, DType type,
                           const AttentionShape& s) override {
    cpu::flash_attention16_forward(out, saved, qkv, type, s);
  }
  void attention16_backward(void* dqkv, float*, const void* dout, const void* out, const void* qkv,
                            const float* saved, DType type, const AttentionShape& s) override {
    cpu::flash_attention16_backward(dqkv, dout, out, qkv, saved, type, s);
  }

  void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight, size_t N,
                       size_t C, float eps) override {
    cpu::rmsnorm_forward(out, rstd, inp, weight, N, C, eps);
  }
  void fused_residual_rmsnorm_forward(float* residual, float* out, float* rstd, const float* a,
                                      const float* b, const float* weight, size_t N, size_t C,
                                      float eps) override {
    cpu::fused_residual_rmsnorm_forward(residual, out, rstd, a, b, weight, N, C, eps);
  }
  void rmsnorm_backward(float* dinp, float* dweight, const float* dout, const float* inp,
                        const float* weight, const float* rstd, size_t N, size_t C) override {
    cpu::rmsnorm_backward(dinp, dweight, dout, inp, weight, rstd, N, C);
  }
  void rope_forward(float* x, size_t B, size_t T, size_t blocks, size_t block_heads,
                    size_t rotated_heads, size_t hs, size_t pos0, const RopeParams& p) override {
    cpu::rope_apply(x, B, T, blocks, block_heads, rotated_heads, hs, pos0, p, false);
  }
  void rope_backward(float* dx, size_t B, size_t T, size_t blocks, size_t block_heads,
                     size_t rotated_heads, size_t hs, size_t pos0, const RopeParams& p) override {
    cpu::rope_apply(dx, B, T, blocks, block_heads, rotated_heads, hs, pos0, p, true);
  }
  void swiglu_forward(float* out, const float* inp, size_t N, size_t H) override {
    cpu::swiglu_forward(out, inp, N, H);
  }
  void rope16_forward(void* x, DType type, size_t B, size_t T, size_t blocks, size_t block_heads,
                      size_t rotated_heads, size_t hs, size_t pos0, const RopeParams& p) override {
    cpu::rope16_apply(x, type, B, T, blocks, block_heads, rotated_heads, hs, pos0, p, false);
  }
  void rope16_backward(void* dx, DType type, size_t B, size_t T, size_t blocks, size_t block_heads,
                       size_t rotated_heads, size_t hs, size_t pos0, const RopeParams& p) override {
    cpu::rope16_apply(dx, type, B, T, blocks, block_heads, rotated_heads, hs, pos0, p, true);
  }
  void swiglu16_forward(void* out, const void* inp, DType type, size_t N, size_t H) override {
    cpu::swiglu16_forward(out, inp, type, N, H);
  }
  void swiglu16_backward(void* dinp, const void* inp, const void* dout, DType type, size_t N,
                         size_t H) override {
    cpu::swiglu16_backward(dinp, inp, dout, type, N, H);
  }
  void swiglu_backward(float* dinp, const float* inp, const float* dout, size_t N,
                       size_t H) override {
    cpu::swiglu_backward(dinp, inp, dout, N, H);
  }
  void gqa_attention_forward(float* out, float* att, const float* qkv, size_t B, size_t T,
                             size_t NH, size_t KVH, size_t hs) override {
    cpu::gqa_attention_forward(out, att, qkv, B, T, NH, KVH, hs);
  }
  void gqa_attention_backward(float* dqkv, float* datt, const float* dout, const float* qkv,
                              const float* att, size_t B, size_t T, size_t NH, size_t KVH,
                              size_t hs) override {
    cpu::gqa_attention_backward(dqkv, datt, dout, qkv, att, B, T, NH, KVH, hs);
  }

  void gelu_forward(float* out, const float* inp, size_t n) override {
    cpu::gelu_forward(out, inp, n);
  }
  void gelu_backward(float* dinp, const float* inp, const float* dout, size_t n) override {
    cpu::gelu_backward(dinp, inp, dout, n);
  }

  void residual_forward(float* out, const float* a, const float* b, size_t n) override {
    cpu::residual_forward(out, a, b, n);
  }
  void residual_backward(float* da, float* db, const float* dout, size_t n) override {
    cpu::residual_backward(da, db, dout, n);
  }

  void softmax_xent_forward(float* losses, const float* logits, const int32_t* targets, size_t N,
                            size_t V, size_t Vp) override {
    cpu::softmax_xent_forward(losses, logits, targets, N, V, Vp);
  }
  void softmax_xent_forward_backward(float* dlogits, float* losses, const float* logits,
                                     const int32_t* targets, float dloss, size_t N, size_t V,
                                     size_t Vp) override {
    cpu::softmax_xent_forward_backward(dlogits, losses, logits, targets, dloss, N, V, Vp);
  }

  void encoder_forward_vocab_range(float* out, const int32_t* tokens, const float* wte_local,
                                   const float* wpe, size_t vocab_start, size_t vocab_count,
                                   size_t B, size_t T, size_t C) override {
    cpu::encoder_forward_vocab_range(out, tokens, wte_local, wpe, vocab_start, vocab_count, B, T,
                                     C);
  }
  void encoder_backward_vocab_range(float* dwte_local, float* dwpe, const float* dout,
                                    const int32_t* tokens, size_t vocab_start, size_t vocab_count,
                                    size_t B, size_t T, size_t C) override {
    cpu::encoder_backward_vocab_range(dwte_local, dwpe, dout, tokens, vocab_start, vocab_count, B,
                                      T, C);
  }
  void vocab_xent_partials(float* partials, const float* logits, const int32_t* targets, size_t N,
                           size_t Vl, size_t vocab_start, size_t V) override {
    cpu::vocab_xent_partials(partials, logits, targets, N, Vl, vocab_start, V);
  }
  void vocab_xent_finish(float* dlogits, float* losses, const float* logits,
                         const float* all_partials, size_t ranks, const int32_t* targets,
                         float dloss, size_t N, size_t Vl, size_t vocab_start, size_t V) override {
    cpu::vocab_xent_finish(dlogits, losses, logits, all_partials, ranks, targets, dloss, N, Vl,
                           vocab_start, V);
  }

  void encoder16_forward(float* out, const int32_t* tokens, const void* wte_local, const void* wpe,
                         DType type, size_t vocab_start, size_t vocab_count, size_t B, size_t T,
                         size_t C) override {
    cpu::encoder16_forward(out, tokens, wte_local, wpe, type, vocab_start, vocab_count, B, T, C);
  }
  void softmax_xent16_forward_backward(void* dlogits, float* losses, const float* logits,
                                       const int32_t* targets, DType type, float dloss, size_t N,
                                       size_t V, size_t Vp) override {
    cpu::softmax_xent16_forward_backward(dlogits, losses, logits, targets, type, dloss, N, V, Vp);
  }
  void vocab_xent16_finish(void* dlogits, float* losses, const float* logits,
                           const float* all_partials, size_t ranks, const int32_t* targets,
                           DType type, float dloss, size_t N, size_t Vl, size_t vocab_start,
                           size_t V) override {
    cpu::vocab_xent16_finish(dlogits, losses, logits, all_partials, ranks, targets, type, dloss, N,
                             Vl, vocab_start, V);
  }

  void adamw_update(float* param, float* m, float* v, const float* grad, size_t n,
                    const AdamWParams& p) override {
    cpu::adamw_update(param, m, v, grad, n, p);
  }
  void adamw_update_segments(float* param, float* m, float* v, const float* grad, void* copy,
                             DType copy_type, const AdamWSegment* segments, size_t num_segments,
                             const AdamWParams& p) override {
    for (size_t i = 0; i < num_segments; ++i) {  // a call costs nothing on the CPU
      const AdamWSegment& s = segments[i];
      AdamWParams ps = p;
      ps.weight_decay = s.weight_decay;
      const size_t o = s.offset;
      if (copy == nullptr)
        cpu::adamw_update(param + o, m + o, v + o, grad + o, s.count, ps);
      else
        update_with_copy(param + o, m + o, v + o, grad + o,
                         static_cast<std::byte*>(copy) + o * dtype_size(copy_type), copy_type,
                         s.count, ps);
    }
  }

  double sum_squares(const float* x, size_t n) override { return cpu::sum_squares(x, n); }
  void sum_squares_to(double* result, const float* x, size_t n) override {
    *result = cpu::sum_squares(x, n);
  }
  void scale(float* x, size_t n, float s) override { cpu::scale(x, n, s); }
  void transpose_blocks(void* out, const void* in, size_t X, size_t Y, size_t row_bytes) override {
    cpu::transpose_blocks(out, in, X, Y, row_bytes);
  }
  void convert_from_f32(void* dst, DType dst_type, const float* src, size_t n) override {
    tierzero::convert_from_f32(dst, dst_type, src, n);
  }
  void convert_to_f32(float* dst, const void* src, DType src_type, size_t n) override {
    tierzero::convert_to_f32(dst, src, src_type, n);
  }

 private:
  // One segment's update with its copy: bf16 in one vectorised pass (cpu_ops.hpp), the other
  // types as the update then the conversion.
  static void update_with_copy(float* param, float* m, float* v, const float* grad, void* copy,
                               DType copy_type, size_t n, const AdamWParams& p) {
    if (copy_type == DType::bf16) {
      cpu::adamw_update_with_copy(param, m, v, grad, static_cast<uint16_t*>(copy), n, p);
      return;
    }
    cpu::adamw_update(param, m, v, grad, n, p);
    tierzero::convert_from_f32(copy, copy_type, param, n);
  }
};

}  // namespace

std::unique_ptr<Kernels> make_cpu_kernels() {
  return std::make_unique<CpuKernels>();
}

}  // namespace tierzero::kernels
