// Kernels: the compute interface the GPT layers call, implemented once per backend
// (kernels/cpu with OpenMP + OpenBLAS, kernels/cuda with real CUDA kernels + cuBLASLt).
// Pure compute on raw pointers of the backend's memory: no ownership, no communication.
//
// Conventions, identical on every backend:
//  - Row-major, fp32. Shapes are given in the comment next to each pointer.
//  - Forward kernels overwrite their outputs.
//  - Backward kernels ACCUMULATE (+=) into every parameter gradient, which is what makes gradient
//    accumulation across micro-batches free, and into input (activation) gradients unless marked
//    otherwise: an input gradient with one term only is WRITTEN WHOLE (never read, so it needs no
//    fill): matmul_backward's with GradWrite::overwrite, matmul_backward_gelu's dpre,
//    attention_backward's dqkv, swiglu_backward's dinp, and rope_backward's in place. Callers zero
//    what accumulates and must start at zero.
//  - Pointers marked "nullable" may be null and are then skipped.
//  - On CUDA every call is asynchronous on the stream given to set_stream(); on the CPU every call
//    has finished when it returns.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "tierzero/core/dtype.hpp"
#include "tierzero/kernels/matmul_precision.hpp"

namespace tierzero::kernels {

struct AdamWParams {
  float lr;
  float beta1;
  float beta2;
  float eps;
  float weight_decay;  // decoupled: p -= lr * weight_decay * p, before the Adam update
  float grad_scale;    // gradients are multiplied by this first (clipping, loss-scale undo)
  int64_t step;        // 1-based step count used for bias correction
};

// How a backward kernel writes an input gradient: added into it (the convention above), or
// overwritten, for a gradient that has no other term: its caller then skips the zero fill, and
// the product does not read it (cuBLASLt's beta 0).
enum class GradWrite { accumulate, overwrite };

// One piece of a shard for adamw_update_segments, with its own weight decay (a unit's matrices
// decay, its biases and norms do not).
struct AdamWSegment {
  size_t offset;  // elements into param, m, v, grad and copy
  size_t count;
  float weight_decay;
};

// The extents of one attention call: B sequences of T positions, n_head query heads and
// n_kv_head key/value heads of head_dim channels each.
struct AttentionShape {
  size_t B = 0;
  size_t T = 0;
  size_t n_head = 0;
  size_t n_kv_head = 0;
  size_t head_dim = 0;
  // The layout of a qkv row: false, q (NH hd) then k (NKV hd) then v (NKV hd); true, the Llama
  // family's grouped layout, NKV groups of (NH / NKV + 2) heads (the group's query heads, its k
  // head, its v head), which keeps a group whole on one tensor- or sequence-parallel rank.
  bool grouped = false;

  size_t q_width() const { return n_head * head_dim; }             // channels of q and of out
  size_t kv_width() const { return n_kv_head * head_dim; }         // channels of k, of v
  size_t qkv_width() const { return q_width() + 2 * kv_width(); }  // a row of qkv
  // GPT-2's multi-head attention over C channels: NH heads, as many kv heads, C / NH each.
  static AttentionShape mha(size_t B, size_t T, size_t C, size_t NH) {
    return {B, T, NH, NH, NH > 0 ? C / NH : 0};
  }
};
// Rotary frequencies: inv_freq[i] = 1 / theta^(2i / hs), then, with llama3 set, Llama 3's
// scaling (Hugging Face _compute_llama3_parameters): wavelengths longer than
// original_max / low_freq_factor divided by factor, shorter than original_max / high_freq_factor
// kept, and the band between interpolated smoothly.
struct RopeParams {
  float theta = 10000.0f;
  bool llama3 = false;
  float factor = 8.0f;
  float low_freq_factor = 1.0f;
  float high_freq_factor = 4.0f;
  float original_max = 8192.0f;
};
// inv_freq (hs / 2) for p, in fp32 as Hugging Face computes it. Shared by every backend.
void rope_inv_freq(float* inv_freq, size_t hs, const RopeParams& p);

class Kernels {
 public:
  virtual ~Kernels() = default;
  virtual const char* backend_name() const = 0;

  // Native stream (cudaStream_t on CUDA, ignored on CPU). Null is the default stream.
  virtual void set_stream(void* native_stream) = 0;
  virtual void* stream() const = 0;  // the one set last (null: the default stream)
  // Scratch memory the backend may use (CUDA: cuBLASLt, the partial sums and sort buffers of its
  // deterministic gradient sums); the caller owns and accounts for it.
  virtual size_t workspace_bytes() const = 0;
  virtual void set_workspace(void* workspace, size_t bytes) = 0;

  // out[b,t,:] = wte[tokens[b,t],:] + wpe[t,:]
  virtual void encoder_forward(float* out,             // (B, T, C)
                               const int32_t* tokens,  // (B, T)
                               const float* wte,       // (Vp, C)
                               const float* wpe,       // (maxT, C)
                               size_t B, size_t T, size_t C) = 0;
  virtual void encoder_backward(float* dwte,            // (Vp, C) +=
                                float* dwpe,            // (maxT, C) +=
                                const float* dout,      // (B, T, C)
                                const int32_t* tokens,  // (B, T)
                                size_t B, size_t T, size_t C) = 0;

  // out = (inp - mean) * rstd * weight + bias over the last axis; eps 1e-5, biased variance.
  virtual void layernorm_forward(float* out,           // (N, C)
                                 float* mean,          // (N)
                                 float* rstd,          // (N)
                                 const float* inp,     // (N, C)
                                 const float* weight,  // (C)
                                 const float* bias,    // (C)
                                 size_t N, size_t C) = 0;
  virtual void layernorm_backward(float* dinp,          // (N, C) +=
                                  float* dweight,       // (C) +=
                                  float* dbias,         // (C) +=
                                  const float* dout,    // (N, C)
                                  const float* inp,     // (N, C)
                                  const float* weight,  // (C)
                                  const float* mean,    // (N)
                                  const float* rstd,    // (N)
                                  size_t N, size_t C) = 0;
  // residual = a + b, then layernorm_forward(out, mean, rstd, residual, weight, bias): a residual
  // add and the layernorm after it in one pass, so the sum is not read back from memory. Bitwise
  // the same as residual_forward followed by layernorm_forward on every backend. residual may
  // alias a or b; out aliases none of the others.
  virtual void fused_residual_layernorm_forward(float* residual,      // (N, C)
                                                float* out,           // (N, C)
                                                float* mean,          // (N)
                                                float* rstd,          // (N)
                                                const float* a,       // (N, C)
                                                const float* b,       // (N, C)
                                                const float* weight,  // (C)
                                                const float* bias,    // (C)
                                                size_t N, size_t C) = 0;

  // ---- 16-bit norms: the LayerNorm and RMSNorm of 16-bit training ----
  // The norms above (and below, RMSNorm) with their parameters (the weights' working copy) and
  // their output in one 16-bit `type`, bf16 or fp16, the output being the next linear's 16-bit
  // input; the input, the residual stream, the statistics and every gradient stay fp32. Each
  // output element is rounded once from its fp32 value: on every backend bitwise the fp32 op on
  // the widened parameters followed by convert_from_f32. An Error for another type.
  virtual void layernorm16_forward(void* out,           // (N, C) type
                                   float* mean,         // (N)
                                   float* rstd,         // (N)
                                   const float* inp,    // (N, C)
                                   const void* weight,  // (C) type
                                   const void* bias,    // (C) type
                                   DType type, size_t N, size_t C) = 0;
  virtual void fused_residual_layernorm16_forward(float* residual,     // (N, C)
                                                  void* out,           // (N, C) type
                                                  float* mean,         // (N)
                                                  float* rstd,         // (N)
                                                  const float* a,      // (N, C)
                                                  const float* b,      // (N, C)
                                                  const void* weight,  // (C) type
                                                  const void* bias,    // (C) type
                                                  DType type, size_t N, size_t C) = 0;
  // dinp16: null, or (N, C) of `type` = dinp rounded after the += (the 16-bit copy of the
  // stream's gradient the next branch's products read, written in this pass rather than another).
  virtual void layernorm16_backward(float* dinp,         // (N, C) +=
                                    void* dinp16,        // (N, C) type, nullable
                                    float* dweight,      // (C) +=
                                    float* dbias,        // (C) +=
                                    const float* dout,   // (N, C)
                                    const float* inp,    // (N, C)
                                    const void* weight,  // (C) type
                                    const float* mean,   // (N)
                                    const float* rstd,   // (N)
                                    DType type, size_t N, size_t C) = 0;
  virtual void rmsnorm16_forward(void* out,           // (N, C) type
                                 float* rstd,         // (N)
                                 const float* inp,    // (N, C)
                                 const void* weight,  // (C) type
                                 DType type, size_t N, size_t C, float eps) = 0;
  virtual void fused_residual_rmsnorm16_forward(float* residual,     // (N, C)
                                                void* out,           // (N, C) type
                                                float* rstd,         // (N)
                                                const float* a,      // (N, C)
                                                const float* b,      // (N, C)
                                                const void* weight,  // (C) type
                                                DType type, size_t N, size_t C, float eps) = 0;
  virtual void rmsnorm16_backward(float* dinp,         // (N, C) +=
                                  void* dinp16,        // (N, C) type, nullable: as layernorm's
                                  float* dweight,      // (C) +=
                                  const float* dout,   // (N, C)
                                  const float* inp,    // (N, C)
                                  const void* weight,  // (C) type
                                  const float* rstd,   // (N)
                                  DType type, size_t N, size_t C) = 0;

  // How matmul_forward / matmul_backward compute their products (matmul_precision.hpp); operands
  // and results stay fp32 in memory. A CUDA setting: the CUDA backend maps tf32, bf16 and fp16 to
  // cuBLASLt's fast fp32 compute types (tensor cores, fp32 accumulation); a product for which
  // cuBLASLt offers no such algorithm runs in exact fp32 (logged once). The CPU backend accepts
  // every value and keeps computing in fp32, so a config written for a GPU runs unchanged on the
  // CPU; matmul_precision() reports the backend's setting (always fp32 on the CPU). Default fp32.
  virtual void set_matmul_precision(MatmulPrecision precision) = 0;
  virtual MatmulPrecision matmul_precision() const = 0;

  // out = inp @ weight^T + bias
  virtual void matmul_forward(float* out,           // (N, OC)
                              const float* inp,     // (N, IC)
                              const float* weight,  // (OC, IC)
                              const float* bias,    // (OC) nullable
                              size_t N, size_t IC, size_t OC) = 0;
  // dinp (+)= dout @ weight as dinp_write says (overwrite: the same values as accumulating into
  // zeros, a zero's sign aside); dweight and dbias always accumulate. dinp and dweight nullable.
  virtual void matmul_backward(float* dinp,          // (N, IC) += or =
                               float* dweight,       // (OC, IC) +=
                               float* dbias,         // (OC) += nullable
                               const float* dout,    // (N, OC)
                               const float* inp,     // (N, IC)
                               const float* weight,  // (OC, IC)
                               size_t N, size_t IC, size_t OC, GradWrite dinp_write) = 0;

  // A product with 16-bit operands, the tensor cores' native form: c (m, n) = a (m, k) b^T, a and
  // b (n, k) both of `type` (bf16 or fp16), accumulated and written in fp32. Not a training op
  // (matmul_forward keeps the fp32 interface): what `bench train` measures the chip's 16-bit GEMM
  // rate with, in the same run, to divide model FLOPs by (MFU). The CPU widens the operands and
  // runs its fp32 product. An Error for other types.
  virtual void gemm_16bit(float* c,       // (m, n)
                          const void* a,  // (m, k) type
                          const void* b,  // (n, k) type
                          DType type, size_t m, size_t n, size_t k) = 0;

  // ---- 16-bit linears: the products on the tensor cores' native operands ----
  // A linear whose input, weights (and bias) and output gradient are all held in one 16-bit
  // `type`, bf16 or fp16: the working dtype of 16-bit training. Each product accumulates in fp32
  // and each result is rounded once, from its fp32 value (with the bias, and GELU where named),
  // into its own type: fp32 or `type` (a 16-bit result is the next product's operand, an fp32 one
  // feeds the fp32 residual stream or a norm's backward). fp32 stays the reference: the CPU widens
  // the operands, runs the fp32 ops above and rounds what is stored in 16 bits, so its results are
  // bitwise those ops on the widened values; CUDA runs cuBLASLt on the 16-bit operands
  // (CUBLAS_COMPUTE_32F), whose sums differ from them in the order of addition, and where
  // cuBLASLt has no epilogue for a shape adds the bias or applies GELU to the rounded product
  // (a second rounding). An Error for another type, a result of a third type, or a 16-bit input
  // gradient asked to accumulate. dweight and dbias are fp32 and accumulate, as above.
  virtual void matmul16_forward(void* out, DType out_type,  // (N, OC) out_type: fp32 or type
                                const void* inp,            // (N, IC) type
                                const void* weight,         // (OC, IC) type
                                const void* bias,           // (OC) type, nullable
                                DType type, size_t N, size_t IC, size_t OC) = 0;
  // dinp (N, IC) of dinp_type: fp32 added into or overwritten as dinp_write says, 16-bit
  // overwritten only; dinp and dweight nullable.
  virtual void matmul16_backward(void* dinp, DType dinp_type,  // (N, IC) dinp_type
                                 float* dweight,               // (OC, IC) +=
                                 float* dbias,                 // (OC) += nullable
                                 const void* dout,             // (N, OC) type
                                 const void* inp,              // (N, IC) type
                                 const void* weight,           // (OC, IC) type
                                 DType type, size_t N, size_t IC, size_t OC,
                                 GradWrite dinp_write) = 0;
  // matmul_gelu_forward in 16 bits: pre = the product with its bias, out = gelu of pre's fp32
  // value, both rounded to type (cuBLASLt's GELU_AUX_BIAS epilogue with 16-bit outputs).
  virtual void matmul16_gelu_forward(void* out,           // (N, OC) type
                                     void* pre,           // (N, OC) type
                                     const void* inp,     // (N, IC) type
                                     const void* weight,  // (OC, IC) type
                                     const void* bias,    // (OC) type, nullable
                                     DType type, size_t N, size_t IC, size_t OC) = 0;
  // matmul_backward_gelu in 16 bits: dpre = gelu'(pre) * (dout @ weight) from the product's fp32
  // value, rounded to type and OVERWRITTEN (cuBLASLt's DGELU epilogue with a 16-bit output).
  virtual void matmul16_backward_gelu(void* dpre,          // (N, IC) type, overwritten
                                      float* dweight,      // (OC, IC) +=
                                      float* dbias,        // (OC) += nullable
                                      const void* dout,    // (N, OC) type
                                      const void* inp,     // (N, IC) type, gelu(pre)
                                      const void* pre,     // (N, IC) type
                                      const void* weight,  // (OC, IC) type
                                      DType type, size_t N, size_t IC, size_t OC) = 0;

  // A linear layer with GELU after it (the MLP's fc): matmul_forward into pre, then gelu_forward
  // of pre into out, in one call, so a backend can apply GELU in the product's epilogue instead
  // of a pass over memory. pre is kept for the backward. The CPU backend runs the two ops (the
  // same bits); CUDA uses cuBLASLt's GELU_AUX_BIAS epilogue (the tanh GELU, with a tanh whose
  // accuracy cuBLASLt does not document) and the two ops where cuBLASLt has no such algorithm (OC
  // not a multiple of 8, say).
  virtual void matmul_gelu_forward(float* out,           // (N, OC) gelu(pre)
                                   float* pre,           // (N, OC) inp @ weight^T + bias
                                   const float* inp,     // (N, IC)
                                   const float* weight,  // (OC, IC)
                                   const float* bias,    // (OC) nullable
                                   size_t N, size_t IC, size_t OC) = 0;
  // matmul_backward of a linear whose input was gelu(pre) (the MLP's projection), with
  // gelu_backward folded into its input gradient: dpre = gelu'(pre) * (dout @ weight),
  // OVERWRITTEN (not +=: the gradient of pre has no other term);
  // dweight and dbias accumulate as in matmul_backward. On the CPU bitwise the unfused sequence
  // (zeroed gradients, matmul_backward, gelu_backward); on CUDA cuBLASLt's DGELU epilogue.
  virtual void matmul_backward_gelu(float* dpre,          // (N, IC) overwritten
                                    float* dweight,       // (OC, IC) +=
                                    float* dbias,         // (OC) += nullable
                                    const float* dout,    // (N, OC)
                                    const float* inp,     // (N, IC) gelu(pre)
                                    const float* pre,     // (N, IC)
                                    const float* weight,  // (OC, IC)
                                    size_t N, size_t IC, size_t OC) = 0;

  // Causal self-attention with grouped key/value heads (s.n_kv_head divides s.n_head; query head
  // h reads kv head h / (n_head / n_kv_head); GPT-2 has n_kv_head == n_head). qkv[b,t,:] holds
  // q (NH*hd), then k (NKV*hd), then v (NKV*hd); head h uses its hd channels of each; scores are
  // scaled by 1/sqrt(hd). `saved` is what the forward keeps for the backward:
  // attention_saved_floats(s) of it. Both backends run a tiled kernel (FlashAttention-2's online
  // softmax, nothing of size T^2) and keep the per-row logsumexp of the scaled scores (B, NH, T).
  virtual size_t attention_saved_floats(const AttentionShape& s) const = 0;
  // The backward's scratch (contents undefined on entry), attention_scratch_floats(s) floats;
  // 0 on both backends (each recomputes what it needs tile by tile).
  virtual size_t attention_scratch_floats(const AttentionShape& s) const = 0;
  virtual void attention_forward(float* out,        // (B, T, NH*hd)
                                 float* saved,      // (attention_saved_floats)
                                 const float* qkv,  // (B, T, (NH + 2 NKV) hd)
                                 const AttentionShape& s) = 0;
  // dqkv = d(qkv) for dout, written whole (never read, so it needs no fill); out and saved are
  // the forward's.
  virtual void attention_backward(float* dqkv,         // (B, T, (NH + 2 NKV) hd) written whole
                                  float* scratch,      // (attention_scratch_floats), nullable if 0
                                  const float* dout,   // (B, T, NH*hd)
                                  const float* out,    // (B, T, NH*hd)
                                  const float* qkv,    // (B, T, (NH + 2 NKV) hd)
                                  const float* saved,  // (attention_saved_floats)
                                  const AttentionShape& s) = 0;

  // The fused attention of 16-bit training: qkv, out, dout and dqkv of one 16-bit `type`, bf16 or
  // fp16, `saved` (the logsumexp) fp32 as above; each element of out and dqkv rounded once from
  // its fp32 value, dqkv written whole. The CPU widens, runs the two calls above and rounds:
  // bitwise those on the widened tensors. CUDA reads and writes `type` in the kernels
  // attention_forward would run: at a 16-bit matmul precision on sm_80 and later the tensor-core
  // ones (bf16 products; fp16 values are rounded to bf16 as their tiles load), else the fp32
  // CUDA-core ones. An Error for another type.
  virtual void attention16_forward(void* out,        // (B, T, NH*hd) type
                                   float* saved,     // (attention_saved_floats)
                                   const void* qkv,  // (B, T, (NH + 2 NKV) hd) type
                                   DType type, const AttentionShape& s) = 0;
  virtual void attention16_backward(void* dqkv,        // (B, T, (NH + 2 NKV) hd) type, whole
                                    float* scratch,    // (attention_scratch_floats), nullable if 0
                                    const void* dout,  // (B, T, NH*hd) type
                                    const void* out,   // (B, T, NH*hd) type
                                    const void* qkv,   // (B, T, (NH + 2 NKV) hd) type
                                    const float* saved,  // (attention_saved_floats)
                                    DType type, const AttentionShape& s) = 0;

  // ---- the Llama family's operations (llama_ops below; see RopeParams) ----

  // RMSNorm (Llama): out = inp * rstd * weight, rstd = 1 / sqrt(mean(inp^2) + eps) per row.
  virtual void rmsnorm_forward(float* out,           // (N, C)
                               float* rstd,          // (N)
                               const float* inp,     // (N, C)
                               const float* weight,  // (C)
                               size_t N, size_t C, float eps) = 0;
  // residual = a + b, then rmsnorm_forward(out, rstd, residual, weight, eps) in one pass: the
  // Llama block's residual adds with the norm after them. Bitwise residual_forward followed by
  // rmsnorm_forward on every backend; residual may alias a or b, out none of the others.
  virtual void fused_residual_rmsnorm_forward(float* residual,      // (N, C)
                                              float* out,           // (N, C)
                                              float* rstd,          // (N)
                                              const float* a,       // (N, C)
                                              const float* b,       // (N, C)
                                              const float* weight,  // (C)
                                              size_t N, size_t C, float eps) = 0;
  virtual void rmsnorm_backward(float* dinp,          // (N, C) +=
                                float* dweight,       // (C) +=
                                const float* dout,    // (N, C)
                                const float* inp,     // (N, C)
                                const float* weight,  // (C)
                                const float* rstd,    // (N)
                                size_t N, size_t C) = 0;

  // Rotary position embedding, in place, Hugging Face's rotate_half convention: within a head of
  // hs channels, channel i < hs/2 pairs with i + hs/2 and both turn by the angle
  // (pos0 + t) * inv_freq[i]. Each row of x holds `blocks` blocks of `block_heads` heads; the
  // first `rotated_heads` heads of every block are rotated (the grouped q, k, v layout: a kv
  // group's query heads and its k head). rope_backward applies the inverse rotation, turning the
  // gradient of the rotated values into that of the values before it (in place, not +=).
  virtual void rope_forward(float* x,  // (B, T, blocks, block_heads, hs)
                            size_t B, size_t T, size_t blocks, size_t block_heads,
                            size_t rotated_heads, size_t hs, size_t pos0, const RopeParams& p) = 0;
  virtual void rope_backward(float* dx,  // (B, T, blocks, block_heads, hs)
                             size_t B, size_t T, size_t blocks, size_t block_heads,
                             size_t rotated_heads, size_t hs, size_t pos0, const RopeParams& p) = 0;

  // SwiGLU: out[n, i] = silu(inp[n, i]) * inp[n, H + i] (each row: gate (H), then up (H)).
  virtual void swiglu_forward(float* out,        // (N, H)
                              const float* inp,  // (N, 2H)
                              size_t N, size_t H) = 0;
  virtual void swiglu_backward(float* dinp,        // (N, 2H) written whole, never read
                               const float* inp,   // (N, 2H)
                               const float* dout,  // (N, H)
                               size_t N, size_t H) = 0;
  // The 16-bit forms (16-bit compute of the Llama family): every tensor of one 16-bit `type`,
  // bf16 or fp16, each element computed in fp32 from the widened values and rounded once:
  // bitwise the fp32 op above on the widened tensors followed by convert_from_f32, on every
  // backend (rope16's unrotated heads keep their bits). An Error for another type.
  virtual void rope16_forward(void* x,  // (B, T, blocks, block_heads, hs) type
                              DType type, size_t B, size_t T, size_t blocks, size_t block_heads,
                              size_t rotated_heads, size_t hs, size_t pos0,
                              const RopeParams& p) = 0;
  virtual void rope16_backward(void* dx,  // (B, T, blocks, block_heads, hs) type
                               DType type, size_t B, size_t T, size_t blocks, size_t block_heads,
                               size_t rotated_heads, size_t hs, size_t pos0,
                               const RopeParams& p) = 0;
  virtual void swiglu16_forward(void* out,        // (N, H) type
                                const void* inp,  // (N, 2H) type
                                DType type, size_t N, size_t H) = 0;
  virtual void swiglu16_backward(void* dinp,        // (N, 2H) type, written whole
                                 const void* inp,   // (N, 2H) type
                                 const void* dout,  // (N, H) type
                                 DType type, size_t N, size_t H) = 0;

  // Causal grouped-query attention on the grouped layout: qkv[b,t,:] holds KVH groups of
  // (rep + 2) heads of hs channels, rep = NH / KVH: the group's rep query heads, its k head, its
  // v head. Query head h (of group h / rep) writes out[b,t,h*hs..(h+1)*hs). Scores are scaled by
  // 1/sqrt(hs); att receives the softmax probabilities (zero above the diagonal). The backward
  // sums each k and v head's gradient over its group's query heads.
  virtual void gqa_attention_forward(float* out,        // (B, T, NH hs)
                                     float* att,        // (B, NH, T, T)
                                     const float* qkv,  // (B, T, KVH (rep + 2) hs)
                                     size_t B, size_t T, size_t NH, size_t KVH, size_t hs) = 0;
  virtual void gqa_attention_backward(float* dqkv,        // (B, T, KVH (rep + 2) hs) +=
                                      float* datt,        // (B, NH, T, T) scratch
                                      const float* dout,  // (B, T, NH hs)
                                      const float* qkv,   // (B, T, KVH (rep + 2) hs)
                                      const float* att,   // (B, NH, T, T)
                                      size_t B, size_t T, size_t NH, size_t KVH, size_t hs) = 0;

  // GELU, tanh form: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
  virtual void gelu_forward(float* out, const float* inp, size_t n) = 0;  // (n)
  virtual void gelu_backward(float* dinp,                                 // (n) +=
                             const float* inp,                            // (n)
                             const float* dout,                           // (n)
                             size_t n) = 0;

  // out = a + b
  virtual void residual_forward(float* out, const float* a, const float* b, size_t n) = 0;
  virtual void residual_backward(float* da,  // (n) +=
                                 float* db,  // (n) +=
                                 const float* dout, size_t n) = 0;

  // losses[i] = -log softmax(logits[i, 0..V))[targets[i]]; columns V..Vp are padding and ignored.
  // Every target must be < V (the caller validates data).
  virtual void softmax_xent_forward(float* losses,           // (N)
                                    const float* logits,     // (N, Vp)
                                    const int32_t* targets,  // (N)
                                    size_t N, size_t V, size_t Vp) = 0;
  // Fused forward + backward: writes losses, then OVERWRITES dlogits with
  // dloss * (softmax(logits) - onehot(target)) in columns 0..V and 0 in the padding columns.
  // dlogits may alias logits (in-place), which is how the model saves a (N, Vp) buffer.
  virtual void softmax_xent_forward_backward(float* dlogits,          // (N, Vp)
                                             float* losses,           // (N)
                                             const float* logits,     // (N, Vp)
                                             const int32_t* targets,  // (N)
                                             float dloss, size_t N, size_t V, size_t Vp) = 0;

  // ---- vocabulary-parallel forms (tensor parallelism): this rank holds the rows (wte) or
  // columns (logits) [vocab_start, vocab_start + vocab_count) of the padded vocabulary; the
  // caller sums (all-reduce or reduce-scatter) or gathers across the tensor-parallel group.

  // out[b,t,:] = (vocab_start <= tokens[b,t] < vocab_start + vocab_count ?
  //               wte_local[tokens[b,t] - vocab_start,:] : 0) + (wpe ? wpe[t,:] : 0)
  virtual void encoder_forward_vocab_range(float* out,              // (B, T, C)
                                           const int32_t* tokens,   // (B, T)
                                           const float* wte_local,  // (vocab_count, C)
                                           const float* wpe,        // (maxT, C) nullable
                                           size_t vocab_start, size_t vocab_count, size_t B,
                                           size_t T, size_t C) = 0;
  // dwte_local[tokens[b,t] - vocab_start,:] += dout[b,t,:] for the tokens in range;
  // dwpe[t,:] += dout[b,t,:] when dwpe is given.
  virtual void encoder_backward_vocab_range(float* dwte_local,      // (vocab_count, C) +=
                                            float* dwpe,            // (maxT, C) += nullable
                                            const float* dout,      // (B, T, C)
                                            const int32_t* tokens,  // (B, T)
                                            size_t vocab_start, size_t vocab_count, size_t B,
                                            size_t T, size_t C) = 0;
  // Cross-entropy over a vocabulary split by columns, pass 1 of 2. Of this rank's Vl columns
  // (global indices vocab_start..vocab_start+Vl) those < V are real, the rest padding. Per row:
  // partials[i] = {m, s, x} with m = max over the real columns (-inf when there are none),
  // s = sum of exp(logit - m) over them (0 when none), x = the target's logit when the target
  // is one of this rank's columns, else 0.
  virtual void vocab_xent_partials(float* partials,         // (N, 3)
                                   const float* logits,     // (N, Vl)
                                   const int32_t* targets,  // (N)
                                   size_t N, size_t Vl, size_t vocab_start, size_t V) = 0;
  // Pass 2, from every rank's partials in rank order (an all-gather of pass 1): with
  // M = max_r m_r, S = sum_r s_r exp(m_r - M), X = sum_r x_r: losses[i] = log S + M - X, and
  // when dlogits is given it is OVERWRITTEN with dloss * (exp(logit - M) / S - onehot(target))
  // in the real columns and 0 in the padding columns. dlogits may alias logits.
  virtual void vocab_xent_finish(float* dlogits,                        // (N, Vl) nullable
                                 float* losses,                         // (N)
                                 const float* logits,                   // (N, Vl)
                                 const float* all_partials,             // (ranks, N, 3)
                                 size_t ranks, const int32_t* targets,  // (N)
                                 float dloss, size_t N, size_t Vl, size_t vocab_start,
                                 size_t V) = 0;

  // ---- 16-bit training's embedding and classifier ----
  // encoder_forward_vocab_range with wte_local and wpe in 16 bits (`type`, bf16 or fp16: the
  // weights' working copy) and the residual stream out fp32: bitwise the fp32 op on the widened
  // rows, on every backend. The whole vocabulary is vocab_start 0, vocab_count Vp.
  virtual void encoder16_forward(float* out,             // (B, T, C)
                                 const int32_t* tokens,  // (B, T)
                                 const void* wte_local,  // (vocab_count, C) type
                                 const void* wpe,        // (maxT, C) type, nullable
                                 DType type, size_t vocab_start, size_t vocab_count, size_t B,
                                 size_t T, size_t C) = 0;
  // softmax_xent_forward_backward and vocab_xent_finish with the logits' gradient rounded once to
  // `type` (the head's backward products' 16-bit operand) while the logits, the loss and its
  // softmax stay fp32: bitwise the fp32 op then convert_from_f32, on every backend. dlogits is
  // its own buffer, never null and never overlapping the logits (check_16bit_gradient_buffer).
  virtual void softmax_xent16_forward_backward(void* dlogits,           // (N, Vp) type
                                               float* losses,           // (N)
                                               const float* logits,     // (N, Vp)
                                               const int32_t* targets,  // (N)
                                               DType type, float dloss, size_t N, size_t V,
                                               size_t Vp) = 0;
  virtual void vocab_xent16_finish(void* dlogits,                         // (N, Vl) type
                                   float* losses,                         // (N)
                                   const float* logits,                   // (N, Vl)
                                   const float* all_partials,             // (ranks, N, 3)
                                   size_t ranks, const int32_t* targets,  // (N)
                                   DType type, float dloss, size_t N, size_t Vl, size_t vocab_start,
                                   size_t V) = 0;

  // AdamW (PyTorch semantics, decoupled weight decay) on n elements, in place.
  virtual void adamw_update(float* param,       // (n)
                            float* m,           // (n)
                            float* v,           // (n)
                            const float* grad,  // (n)
                            size_t n, const AdamWParams& p) = 0;
  // adamw_update over every segment, each with its own weight decay and p's other values: the
  // update of a whole unit in one call (on CUDA one launch per 64 segments instead of one per
  // tensor). With a copy, the updated parameters are also rounded into it (copy_type bf16 or fp16;
  // fp32 copies them) in the same pass over memory: the 16-bit working parameters written by the
  // update that produces them. Bitwise the per-segment adamw_update calls, each followed by
  // convert_from_f32 into the copy, on every backend; elements in no segment (a shard's padding)
  // are left as they are.
  virtual void adamw_update_segments(float* param,                  // (extent)
                                     float* m,                      // (extent)
                                     float* v,                      // (extent)
                                     const float* grad,             // (extent)
                                     void* copy,                    // (extent) copy_type, nullable
                                     DType copy_type,               //
                                     const AdamWSegment* segments,  // (num_segments)
                                     size_t num_segments, const AdamWParams& p) = 0;

  // Sum of squares of x, returned to the host (synchronises the stream on CUDA: a host wait that
  // host_waits.hpp, a layer above, does not see; a training step uses sum_squares_to instead).
  virtual double sum_squares(const float* x, size_t n) = 0;  // x (n)
  // The same sum, bit for bit, written to *result in this backend's memory without the host
  // waiting: a step sums every unit's shard this way and reads the results back once.
  virtual void sum_squares_to(double* result,  // (1)
                              const float* x,  // (n)
                              size_t n) = 0;
  // x *= s
  virtual void scale(float* x, size_t n, float s) = 0;  // x (n)
  // out[y][x][:] = in[x][y][:]: swaps the two outer axes of rows of `row_bytes` bytes (any
  // dtype: a copy, bit for bit). Ulysses' re-sharding between sequence slices and head groups is
  // this around an all-to-all, in fp32 or the 16-bit compute dtype.
  virtual void transpose_blocks(void* out,       // (Y, X, row_bytes) bytes
                                const void* in,  // (X, Y, row_bytes) bytes
                                size_t X, size_t Y, size_t row_bytes) = 0;

  // 16-bit working parameters: fp32 rounded to dst_type (nearest, ties to even; NaN stays NaN)
  // and widened back, with the same bits on every backend (core/dtype_bits.hpp). fp32 is a copy.
  virtual void convert_from_f32(void* dst,                                        // (n) dst_type
                                DType dst_type, const float* src, size_t n) = 0;  // src (n)
  virtual void convert_to_f32(float* dst,                                         // (n)
                              const void* src, DType src_type, size_t n) = 0;  // src (n) src_type
};

// The 16-bit ops' argument rule (matmul16_*, the 16-bit norms), shared by the backends: type
// bf16 or fp16, the result fp32 or type, and a 16-bit result never accumulated into. Throws an
// Error naming `op` otherwise.
void check_16bit_types(const char* op, DType type, DType result_type,
                       GradWrite result_write = GradWrite::overwrite);
// The 16-bit classifier's rule (softmax_xent16_forward_backward, vocab_xent16_finish): its
// gradient, `elems` 16-bit elements, is given and shares no byte with the `elems` fp32 logits
// (written in place it would overwrite logits other threads still read). An Error otherwise.
void check_16bit_gradient_buffer(const char* op, const void* dlogits, const float* logits,
                                 size_t elems);

// Issues the kernels called in its scope on another stream and restores the stream before at its
// end: for work that must not queue behind the compute stream (a reduced gradient's widening
// before its copy to the host). Only for the thread that issues the compute stream's kernels.
class KernelStreamScope {
 public:
  KernelStreamScope(Kernels& kernels, void* native_stream)
      : kernels_(kernels), before_(kernels.stream()) {
    kernels_.set_stream(native_stream);
  }
  ~KernelStreamScope() { kernels_.set_stream(before_); }
  KernelStreamScope(const KernelStreamScope&) = delete;
  KernelStreamScope& operator=(const KernelStreamScope&) = delete;

 private:
  Kernels& kernels_;
  void* before_;
};

// The CPU backend (always built).
std::unique_ptr<Kernels> make_cpu_kernels();

}  // namespace tierzero::kernels
