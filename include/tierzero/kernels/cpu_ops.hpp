// The CPU kernels as free functions (OpenMP + OpenBLAS), one per operation of
// tierzero::kernels::Kernels and with the same conventions (row-major fp32, forward overwrites,
// backward accumulates unless its gradient is marked written whole). CpuKernels forwards to these;
// the CPU optimizer offload path calls them directly on host memory, without a Device. Every call
// has finished when it returns and uses the OpenMP thread count current at the call. The matmuls
// split each product among the OpenMP threads and run OpenBLAS single-threaded inside them, so they
// set OpenBLAS's (process-wide) thread count to 1: two spinning thread pools on the same cores
// halved the speed of a step.
#pragma once

#include <cstddef>
#include <cstdint>

#include "tierzero/kernels/kernels.hpp"

namespace tierzero::kernels::cpu {

// out (B,T,C) = wte (Vp,C)[tokens (B,T)] + wpe (maxT,C)[t]
void encoder_forward(float* out, const int32_t* tokens, const float* wte, const float* wpe,
                     size_t B, size_t T, size_t C);
// dwte (Vp,C) += scatter of dout (B,T,C) by tokens (B,T); dwpe (maxT,C) += sum over B of dout
void encoder_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens, size_t B,
                      size_t T, size_t C);

// out (N,C), mean (N), rstd (N) from inp (N,C), weight (C), bias (C); eps 1e-5
void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                       const float* bias, size_t N, size_t C);
// residual (N,C) = a + b (N,C), then layernorm_forward of residual into out, mean, rstd
void fused_residual_layernorm_forward(float* residual, float* out, float* mean, float* rstd,
                                      const float* a, const float* b, const float* weight,
                                      const float* bias, size_t N, size_t C);
// dinp (N,C) +=, dweight (C) +=, dbias (C) += from dout, inp (N,C), weight (C), mean, rstd (N)
void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                        const float* inp, const float* weight, const float* mean, const float* rstd,
                        size_t N, size_t C);

// The 16-bit norms (Kernels::layernorm16_* and rmsnorm16_*): the fp32 norms with the parameters
// of `type` widened and the output rounded to it, row by row. Shapes as in kernels.hpp.
void layernorm16_forward(void* out, float* mean, float* rstd, const float* inp, const void* weight,
                         const void* bias, DType type, size_t N, size_t C);
void fused_residual_layernorm16_forward(float* residual, void* out, float* mean, float* rstd,
                                        const float* a, const float* b, const void* weight,
                                        const void* bias, DType type, size_t N, size_t C);
void layernorm16_backward(float* dinp, void* dinp16, float* dweight, float* dbias,
                          const float* dout, const float* inp, const void* weight,
                          const float* mean, const float* rstd, DType type, size_t N, size_t C);
void rmsnorm16_forward(void* out, float* rstd, const float* inp, const void* weight, DType type,
                       size_t N, size_t C, float eps);
void fused_residual_rmsnorm16_forward(float* residual, void* out, float* rstd, const float* a,
                                      const float* b, const void* weight, DType type, size_t N,
                                      size_t C, float eps);
void rmsnorm16_backward(float* dinp, void* dinp16, float* dweight, const float* dout,
                        const float* inp, const void* weight, const float* rstd, DType type,
                        size_t N, size_t C);

// out (N,OC) = inp (N,IC) @ weight (OC,IC)^T + bias (OC, nullable)
void matmul_forward(float* out, const float* inp, const float* weight, const float* bias, size_t N,
                    size_t IC, size_t OC);
// dinp (N,IC) += (or =, GradWrite) dout (N,OC) @ weight (OC,IC); dweight (OC,IC) += dout^T @
// inp (N,IC); dbias (OC, nullable) += column sums of dout. dinp and dweight nullable.
void matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                     const float* weight, size_t N, size_t IC, size_t OC, GradWrite dinp_write);

// The 16-bit linears (Kernels::matmul16_*): 16-bit operands of `type` widened, the fp32 ops
// above, 16-bit results rounded once from their fp32 values. Shapes and rules as in kernels.hpp.
void matmul16_forward(void* out, DType out_type, const void* inp, const void* weight,
                      const void* bias, DType type, size_t N, size_t IC, size_t OC);
void matmul16_backward(void* dinp, DType dinp_type, float* dweight, float* dbias, const void* dout,
                       const void* inp, const void* weight, DType type, size_t N, size_t IC,
                       size_t OC, GradWrite dinp_write);
void matmul16_gelu_forward(void* out, void* pre, const void* inp, const void* weight,
                           const void* bias, DType type, size_t N, size_t IC, size_t OC);
void matmul16_backward_gelu(void* dpre, float* dweight, float* dbias, const void* dout,
                            const void* inp, const void* pre, const void* weight, DType type,
                            size_t N, size_t IC, size_t OC);

// The naive attention (llm.c's), kept as the reference the tiled one is tested against:
// out (B,T,C), att (B,NH,T,T) probabilities from qkv (B,T,3C); causal, scale 1/sqrt(C/NH)
void attention_forward(float* out, float* att, const float* qkv, size_t B, size_t T, size_t C,
                       size_t NH);
// dqkv (B,T,3C) += from dout (B,T,C), qkv (B,T,3C), att (B,NH,T,T); datt (B,NH,T,T) is scratch
void attention_backward(float* dqkv, float* datt, const float* dout, const float* qkv,
                        const float* att, size_t B, size_t T, size_t C, size_t NH);

// The tiled attention (FlashAttention-2's online softmax, blocks of queries and keys, no T^2
// buffer) with grouped kv heads; shapes as in Kernels::attention_forward. lse (B,NH,T) receives
// the logsumexp of each query row's scaled scores, which is all the backward needs besides out.
void flash_attention_forward(float* out, float* lse, const float* qkv, const AttentionShape& s);
// dqkv (B,T,(NH+2NKV)hd) = from dout, out (B,T,NH hd), qkv and lse (B,NH,T), written whole: the
// probabilities are recomputed tile by tile.
void flash_attention_backward(float* dqkv, const float* dout, const float* out, const float* qkv,
                              const float* lse, const AttentionShape& s);
// The 16-bit attention (Kernels::attention16_*): qkv, out, dout widened, the tiled kernels above,
// out and dqkv rounded to type.
void flash_attention16_forward(void* out, float* lse, const void* qkv, DType type,
                               const AttentionShape& s);
void flash_attention16_backward(void* dqkv, const void* dout, const void* out, const void* qkv,
                                const float* lse, DType type, const AttentionShape& s);
// Llama's operations (kernels.hpp has their exact definitions).
// out (N,C), rstd (N) from inp (N,C), weight (C)
void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight, size_t N,
                     size_t C, float eps);
void fused_residual_rmsnorm_forward(float* residual, float* out, float* rstd, const float* a,
                                    const float* b, const float* weight, size_t N, size_t C,
                                    float eps);
// dinp (N,C) +=, dweight (C) += from dout, inp (N,C), weight (C), rstd (N)
void rmsnorm_backward(float* dinp, float* dweight, const float* dout, const float* inp,
                      const float* weight, const float* rstd, size_t N, size_t C);
// x (B,T,blocks,block_heads,hs) rotated in place (inverse: the backward)
void rope_apply(float* x, size_t B, size_t T, size_t blocks, size_t block_heads,
                size_t rotated_heads, size_t hs, size_t pos0, const RopeParams& p, bool inverse);
// out (N,H) = silu(inp[:, :H]) * inp[:, H:] with inp (N,2H)
void swiglu_forward(float* out, const float* inp, size_t N, size_t H);
// dinp (N,2H) = from inp (N,2H), dout (N,H), written whole
void swiglu_backward(float* dinp, const float* inp, const float* dout, size_t N, size_t H);
// The 16-bit forms of kernels.hpp: the fp32 ops on widened copies, rounded.
void rope16_apply(void* x, DType type, size_t B, size_t T, size_t blocks, size_t block_heads,
                  size_t rotated_heads, size_t hs, size_t pos0, const RopeParams& p, bool inverse);
void swiglu16_forward(void* out, const void* inp, DType type, size_t N, size_t H);
void swiglu16_backward(void* dinp, const void* inp, const void* dout, DType type, size_t N,
                       size_t H);
// out (B,T,NH hs), att (B,NH,T,T) from qkv (B,T,KVH (NH/KVH + 2) hs), grouped layout
void gqa_attention_forward(float* out, float* att, const float* qkv, size_t B, size_t T, size_t NH,
                           size_t KVH, size_t hs);
// dqkv (B,T,KVH (NH/KVH + 2) hs) += from dout (B,T,NH hs), qkv, att (B,NH,T,T); datt scratch
void gqa_attention_backward(float* dqkv, float* datt, const float* dout, const float* qkv,
                            const float* att, size_t B, size_t T, size_t NH, size_t KVH, size_t hs);

// out (n) = gelu_tanh(inp (n))
void gelu_forward(float* out, const float* inp, size_t n);
// dinp (n) += gelu_tanh'(inp (n)) * dout (n)
void gelu_backward(float* dinp, const float* inp, const float* dout, size_t n);
// d (n) = gelu_tanh'(inp (n)) * d (n), in place: the bits of gelu_backward into a zeroed dinp
void gelu_backward_in_place(float* d, const float* inp, size_t n);

// out (n) = a (n) + b (n)
void residual_forward(float* out, const float* a, const float* b, size_t n);
// da (n) += dout (n); db (n) += dout (n)
void residual_backward(float* da, float* db, const float* dout, size_t n);

// losses (N) = cross-entropy of logits (N,Vp) over columns 0..V against targets (N)
void softmax_xent_forward(float* losses, const float* logits, const int32_t* targets, size_t N,
                          size_t V, size_t Vp);
// losses (N) as above, then dlogits (N,Vp) = dloss * (softmax - onehot), 0 in V..Vp;
// dlogits may alias logits
void softmax_xent_forward_backward(float* dlogits, float* losses, const float* logits,
                                   const int32_t* targets, float dloss, size_t N, size_t V,
                                   size_t Vp);

// Vocabulary-parallel forms (kernels.hpp): this rank holds rows/columns
// [vocab_start, vocab_start + vocab_count) of the padded vocabulary.
// out (B,T,C) = wte_local (vocab_count,C)[tokens (B,T) - vocab_start] where in range, else 0,
// + wpe (maxT,C)[t] when wpe is not null
void encoder_forward_vocab_range(float* out, const int32_t* tokens, const float* wte_local,
                                 const float* wpe, size_t vocab_start, size_t vocab_count, size_t B,
                                 size_t T, size_t C);
// dwte_local (vocab_count,C) += scatter of dout (B,T,C) by the in-range tokens (B,T);
// dwpe (maxT,C, nullable) += sum over B of dout
void encoder_backward_vocab_range(float* dwte_local, float* dwpe, const float* dout,
                                  const int32_t* tokens, size_t vocab_start, size_t vocab_count,
                                  size_t B, size_t T, size_t C);
// partials (N,3) = {max, sum of exp(logit - max), target logit or 0} over this rank's real
// columns of logits (N,Vl) (global columns vocab_start.. that are < V)
void vocab_xent_partials(float* partials, const float* logits, const int32_t* targets, size_t N,
                         size_t Vl, size_t vocab_start, size_t V);
// losses (N) from all_partials (ranks,N,3); dlogits (N,Vl, nullable, may alias logits) =
// dloss * (softmax - onehot) in the real columns, 0 in the padding
void vocab_xent_finish(float* dlogits, float* losses, const float* logits,
                       const float* all_partials, size_t ranks, const int32_t* targets, float dloss,
                       size_t N, size_t Vl, size_t vocab_start, size_t V);

// The 16-bit embedding and classifier (Kernels::encoder16_forward, softmax_xent16_*,
// vocab_xent16_finish): the fp32 ops on widened rows, or with the gradient rounded to type.
void encoder16_forward(float* out, const int32_t* tokens, const void* wte_local, const void* wpe,
                       DType type, size_t vocab_start, size_t vocab_count, size_t B, size_t T,
                       size_t C);
void softmax_xent16_forward_backward(void* dlogits, float* losses, const float* logits,
                                     const int32_t* targets, DType type, float dloss, size_t N,
                                     size_t V, size_t Vp);
void vocab_xent16_finish(void* dlogits, float* losses, const float* logits,
                         const float* all_partials, size_t ranks, const int32_t* targets,
                         DType type, float dloss, size_t N, size_t Vl, size_t vocab_start,
                         size_t V);

// param, m, v (n) updated in place by AdamW (PyTorch semantics) from grad (n)
void adamw_update(float* param, float* m, float* v, const float* grad, size_t n,
                  const AdamWParams& p);
// The same update, and where bf16_out is not null it receives bf16(param_new) (round to nearest
// even, NaN kept, as tierzero::float_to_bf16_bits), written in the same pass over memory.
void adamw_update_with_copy(float* param, float* m, float* v, const float* grad,
                            uint16_t* bf16_out /* (n), may be null */, size_t n,
                            const AdamWParams& p);

// The instruction-set paths of the CPU AdamW, slowest first. All give bitwise the same result;
// adamw_update uses the best the CPU runs, lowered (never raised) by the environment variable
// TIERZERO_CPU_ISA=scalar|avx2|avx512, read once per process (an unknown value throws Error).
enum class CpuIsa { scalar = 0, avx2 = 1, avx512 = 2 };
const char* cpu_isa_name(CpuIsa isa);  // "scalar", "avx2", "avx512"
bool cpu_isa_supported(CpuIsa isa);    // this CPU and OS can run the path
const char* adamw_isa();               // the path adamw_update runs
// adamw_update_with_copy on the given path, for tests and benchmarks; throws Error where the CPU
// cannot run it.
void adamw_update_with_copy_on(CpuIsa isa, float* param, float* m, float* v, const float* grad,
                               uint16_t* bf16_out /* (n), may be null */, size_t n,
                               const AdamWParams& p);

// sum of x (n) squared, accumulated in double
double sum_squares(const float* x, size_t n);
// x (n) *= s
void scale(float* x, size_t n, float s);
// out (Y, X, row_bytes)[y][x] = in (X, Y, row_bytes)[x][y], rows of bytes
void transpose_blocks(void* out, const void* in, size_t X, size_t Y, size_t row_bytes);

// The OpenMP thread count the calling thread's kernels use, and setting it for the calling thread
// only. A thread the caller starts begins with OpenMP's default (every core), so a background
// thread that runs these kernels next to the training thread takes the training thread's count.
int threads();
void set_threads(int threads);

}  // namespace tierzero::kernels::cpu
