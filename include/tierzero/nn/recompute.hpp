// Recompute: what a transformer block's forward keeps for its backward, and what the backward
// rebuilds instead (Megatron's activation recomputation).
//  none       everything: the layernorm outputs, qkv, the attention's output and softmax
//             statistics, the MLP's pre-activation and GELU output.
//  selective  all of that but the attention's core (its output and softmax statistics), which
//             the backward recomputes from the kept qkv: no parameters, no collectives, the
//             cheapest part to rebuild per byte saved.
//  full       only each block's input (the checkpoint); the backward re-runs the whole block
//             (activation checkpointing).
// Gradients are bitwise the same in every mode: the recompute runs the same kernels on the same
// inputs (on CUDA a few parameter gradients -- embedding rows, biases, norm gains -- are summed
// with atomics, so there their last bits may change from run to run, in every mode alike).
#pragma once

#include <string>

namespace tierzero::nn {

class Recompute {
 public:
  enum Mode { none, selective, full };
  constexpr Recompute(Mode mode = none) : mode_(mode) {}  // NOLINT: a mode is a Recompute
  // Activation checkpointing as the switch it used to be: on is full recompute.
  constexpr Recompute(bool checkpointing) : mode_(checkpointing ? full : none) {}  // NOLINT
  constexpr Mode mode() const { return mode_; }
  constexpr bool is_full() const { return mode_ == full; }
  constexpr bool is_selective() const { return mode_ == selective; }
  constexpr bool operator==(const Recompute&) const = default;

  const char* name() const;  // "none", "selective", "full"
  // From "none", "selective" or "full"; throws Error naming `where` (a config key, a flag).
  static Recompute parse(const std::string& text, const std::string& where);

 private:
  Mode mode_;
};

}  // namespace tierzero::nn
