// What the sub-modules of a transformer block keep from their forward for their backward: views
// that a BlockActivations slot hands out. Here, below both, so that the modules and the
// activation storage each include these and not one another.
#pragma once

namespace tierzero::nn {

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
  float* qkv;   // (B, T, 3C); grouped: (B, T, KVH (rep + 2) hs), after the rotary embedding
  float* atty;  // (B, T, C) the heads' outputs, before the projection
  // What the kernel keeps for its backward (ActivationDims::attention_saved): each query row's
  // logsumexp (B, NH, T), on every backend (tiled, online-softmax kernels).
  float* lse;
};

// What the MLP keeps from its forward for its backward.
struct MlpActs {
  float* fch;       // (B, T, 4C); SwiGLU: (B, T, 2H) gate, up
  float* fch_gelu;  // (B, T, 4C); SwiGLU: (B, T, H) silu(gate) * up
};

}  // namespace tierzero::nn
