// Reference kernels in double precision: plain loops that follow the mathematical definitions,
// written for being obviously right rather than fast. The kernel tests compare every backend
// against these, and test_reference.cpp checks their backward passes by finite differences.
// Shapes and accumulation semantics are those of tierzero::kernels::Kernels.
#pragma once

#include <cstddef>
#include <cstdint>

namespace tierzero::test::ref {

void encoder_forward(double* out, const int32_t* tokens, const double* wte, const double* wpe,
                     size_t B, size_t T, size_t C);  // out (B,T,C), wte (Vp,C), wpe (maxT,C)
void encoder_backward(double* dwte, double* dwpe, const double* dout, const int32_t* tokens,
                      size_t B, size_t T, size_t C);  // dwte, dwpe +=

void layernorm_forward(double* out, double* mean, double* rstd, const double* inp,
                       const double* weight, const double* bias, size_t N, size_t C);
void layernorm_backward(double* dinp, double* dweight, double* dbias, const double* dout,
                        const double* inp, const double* weight, size_t N, size_t C);  // +=

void matmul_forward(double* out, const double* inp, const double* weight, const double* bias,
                    size_t N, size_t IC, size_t OC);  // bias nullable
void matmul_backward(double* dinp, double* dweight, double* dbias, const double* dout,
                     const double* inp, const double* weight, size_t N, size_t IC,
                     size_t OC);  // +=, dbias nullable

void attention_forward(double* out, double* att, const double* qkv, size_t B, size_t T, size_t C,
                       size_t NH);  // out (B,T,C), att (B,NH,T,T), qkv (B,T,3C)
void attention_backward(double* dqkv, const double* dout, const double* qkv, size_t B, size_t T,
                        size_t C, size_t NH);  // dqkv +=

void gelu_forward(double* out, const double* inp, size_t n);
void gelu_backward(double* dinp, const double* inp, const double* dout, size_t n);  // +=

// losses (N); dlogits (N,Vp) overwritten (nullable: loss only)
void softmax_xent(double* losses, double* dlogits, const double* logits, const int32_t* targets,
                  double dloss, size_t N, size_t V, size_t Vp);

struct AdamW {
  double lr, beta1, beta2, eps, weight_decay, grad_scale;
  int64_t step;
};
void adamw_update(double* param, double* m, double* v, const double* grad, size_t n,
                  const AdamW& p);

}  // namespace tierzero::test::ref
