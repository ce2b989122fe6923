// ModelScratch: activation memory one model shares across micro-batches, because nothing in it
// outlives one module call but into the next module's first kernel (a block's last residual add,
// left as a ResidualSum: the MLP's output in proj() or reduced(), and with full recompute the
// slot's residual2): the projection output a block adds into the stream, the gradients
// inside one block's (or the head-to-final-norm) backward, and with full recompute (activation
// checkpointing) the one block's internals that each forward and recompute rebuilds, with
// selective recompute the one attention core. Under tensor parallelism it
// also holds what the collectives between modules need: the cross-entropy's per-rank partials,
// and with sequence parallelism the all-gathered inputs and gradients of the tensor-parallel
// regions and the reduce-scattered outputs leaving them. Under Ulysses the attention's gradients
// span the whole sequence for the rank's heads, and the all-to-alls pack through the MLP's
// gradient buffers (free while the attention runs), so Ulysses adds no scratch in fp32; in 16-bit
// compute it adds one (B*T, qkv row) packing buffer of its own.
#pragma once

#include <cstddef>

#include "tierzero/device/device_allocator.hpp"
#include "tierzero/nn/activation_buffers.hpp"
#include "tierzero/nn/activation_dims.hpp"
#include "tierzero/nn/block_activations.hpp"
#include "tierzero/nn/recompute.hpp"
#include "tierzero/nn/sp/ulysses_group.hpp"

namespace tierzero::nn {

class ModelScratch {
 public:
  // Releases what it holds, then allocates for dims d in the given mode.
  void allocate(const ActivationDims& d, Recompute recompute, DeviceAllocator& allocator);
  void release();
  bool fits(const ActivationDims& d, Recompute recompute) const {
    return allocated_ && d == dims_ && recompute == recompute_;
  }
  size_t bytes() const { return bytes_; }  // as the MemoryTracker counts them
  static size_t bytes_for(const ActivationDims& d, Recompute recompute);

  // BT: all B*T tokens; S: the stream's rows; Cl, NHl, Hl: this rank's part (see BlockActs);
  // AT, Ts: the attention's rows and sequence (B*T and T without Ulysses).
  float* proj() const { return buffers_.proj.f32(); }              // (BT, C)
  float* dln() const { return buffers_.dln.f32(); }                // (BT, C)
  ComputeTensor dqkv() const { return compute(buffers_.dqkv); }    // (AT, 3Cl) compute
  ComputeTensor datty() const { return compute(buffers_.datty); }  // (AT, Cl) compute
  // The attention backward's scratch: none with the CPU's tiled kernel (null), (B, NHl, Ts, Ts)
  // on CUDA (ActivationDims::attention_scratch).
  float* attention() const { return buffers_.attention.f32(); }
  ComputeTensor dfch() const { return compute(buffers_.dfch); }  // (BT, Hl or 2 Hl: SwiGLU)
  // The gradient of the MLP's activation output: (BT, Hl) compute, for SwiGLU's backward (and in
  // fp32 compute always, where Ulysses packs through it); GPT-2's 16-bit GELU has none.
  ComputeTensor dfch_gelu() const { return compute(buffers_.dfch_gelu); }
  // 16-bit compute only: the residual stream's running gradient rounded to the compute dtype,
  // the output gradient a block's two branch projections read in their backward (all-gathered
  // into gathered_grad() first under sequence parallelism).
  ComputeTensor stream_grad16() const { return compute(buffers_.stream_grad16); }  // (S, C)
  BlockActs block() const;  // full recompute's one block of internals
  // Selective recompute's one attention core (atty, lse; qkv null): every block's forward
  // writes it, its recompute rebuilds it before its backward.
  AttentionActs attention_core() const;
  // Tensor parallel only:
  float* xent_partials() const { return buffers_.xent_partials.f32(); }  // (BT, 3)
  float* xent_all() const { return buffers_.xent_all.f32(); }            // (tp, BT, 3)
  // Sequence parallel only: a norm's output and the stream's gradient all-gathered for the
  // products (compute), a region's output or input gradient reduce-scattered, a norm's partial
  // gain and bias gradients.
  ComputeTensor gathered_in() const { return compute(buffers_.gathered_in); }      // (BT, C)
  ComputeTensor gathered_grad() const { return compute(buffers_.gathered_grad); }  // (BT, C)
  float* reduced() const { return buffers_.reduced.f32(); }                        // (S, C)
  float* norm_grads() const { return buffers_.norm_grads.f32(); }                  // (2, C)
  // Ulysses' packing buffers, each at least (BT, qkv row) of the compute dtype: dfch ((BT, 4C) at
  // tp 1, which Ulysses needs), unused outside the MLP's backward, and dfch_gelu (fp32) or, in
  // 16-bit compute, its own packing buffer. The second is the smaller (SwiGLU's dfch holds gate
  // and up).
  UlyssesBuffers ulysses() const;

 private:
  ComputeTensor compute(const DeviceBuffer& b) const { return {b.data(), dims_.compute}; }

  struct Buffers {
    BlockActivations block;      // 1 block's internals with full recompute, else empty
    AttentionCore core;          // 1 attention core with selective recompute, else empty
    DeviceBuffer proj;           // (BT, C) attproj / fcproj output before the residual add
    DeviceBuffer dln;            // (BT, C) gradient of a layernorm output
    DeviceBuffer dqkv;           // (AT, 3Cl) compute
    DeviceBuffer datty;          // (AT, Cl) compute
    DeviceBuffer attention;      // (attention_scratch) the attention backward's, CUDA only
    DeviceBuffer dfch;           // (BT, Hl) compute
    DeviceBuffer dfch_gelu;      // (BT, Hl) compute: fp32 compute, or 16-bit SwiGLU
    DeviceBuffer stream_grad16;  // (S, C) 16-bit compute only
    DeviceBuffer ulysses_pack;   // (BT, qkv row) compute: 16-bit compute under Ulysses only
    DeviceBuffer xent_partials;  // (BT, 3) this rank's max, sum of exps, target logit
    DeviceBuffer xent_all;       // (tp, BT, 3) every rank's
    DeviceBuffer gathered_in;    // (BT, C) compute: a layernorm output all-gathered for a GEMM
    DeviceBuffer gathered_grad;  // (BT, C) compute: the stream's gradient all-gathered
    DeviceBuffer reduced;        // (S, C) a region's output or input gradient, reduce-scattered
    DeviceBuffer norm_grads;     // (2, C) a layernorm's gain and bias gradients over S rows
  };
  static void visit(Buffers& b, const ActivationDims& d, Recompute recompute,
                    const BufferVisitor& fn);

  ActivationDims dims_;
  bool allocated_ = false;
  Recompute recompute_;
  Buffers buffers_;
  size_t bytes_ = 0;
};

}  // namespace tierzero::nn
