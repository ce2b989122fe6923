// What the sub-modules of a transformer block keep from their forward for their backward: views
// that a BlockActivations slot hands out. Here, below both, so that the modules and the
// activation storage each include these and not one another.
#pragma once

#include <cstddef>

#include "tierzero/core/dtype.hpp"

namespace tierzero::nn {

// An activation that is a product's operand, held in the compute dtype
// (ActivationDims::compute): fp32 in the reference, the 16-bit working type in 16-bit compute.
// f32() is the fp32 view and throws in 16-bit compute, so an fp32 kernel never reads 16-bit
// bits; raw() is what the 16-bit kernels take, of `type`.
struct ComputeTensor {
  void* data = nullptr;
  DType type = DType::f32;

  float* f32() const;  // Error unless type is fp32
  void* raw() const { return data; }
  explicit operator bool() const { return data != nullptr; }
  // The tensor `elems` elements further on (a slot of a stacked buffer); null stays null.
  ComputeTensor at(size_t elems) const {
    return {data ? static_cast<char*>(data) + elems * dtype_size(type) : nullptr, type};
  }
};

// What a layernorm's forward keeps besides its output, for the backward.
struct LayerNormStats {
  float* mean;  // (S) per row of the stream (S = B*T unless sequence parallel); unused by RMSNorm
  float* rstd;  // (S)
};

// What the attention keeps from its forward for its backward. Under Ulysses (slice of T = Ts /
// ulysses positions, Cl = C / ulysses, NHl = NH / ulysses): qkv (B, Ts, 3Cl) this rank's heads
// over the whole sequence, as the kernel read it; atty (B, T, C) all heads' outputs of the slice,
// as the projection read it (the same count as (B, Ts, Cl)); lse (B, NHl, Ts).
struct AttentionActs {
  ComputeTensor qkv;   // (B, T, 3C); grouped: (B, T, KVH (rep + 2) hs), after the rotary embedding
  ComputeTensor atty;  // (B, T, C) the heads' outputs, before the projection
  // What the kernel keeps for its backward (ActivationDims::attention_saved): each query row's
  // logsumexp (B, NH, T), on every backend (tiled, online-softmax kernels).
  float* lse;
};

// What the MLP keeps from its forward for its backward.
struct MlpActs {
  ComputeTensor fch;       // (B, T, 4C); SwiGLU: (B, T, 2H) gate, up
  ComputeTensor fch_gelu;  // (B, T, 4C); SwiGLU: (B, T, H) silu(gate) * up
};

}  // namespace tierzero::nn
