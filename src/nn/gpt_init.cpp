// GPT-2 initialisation (as in GPT-2 and llm.c): N(0, 0.02) weights, the residual output
// projections scaled by 1/sqrt(2 L) so the residual stream's variance does not grow with depth,
// zero biases and unit layernorm gains. Values are drawn for the whole model's full tensors in
// its order, also those this rank does not hold, so a tensor-parallel rank gets exactly its piece
// and a pipeline stage exactly its tensors of the one-rank model.
#include <cmath>
#include <cstring>
#include <vector>

#include "tierzero/core/random.hpp"
#include "tierzero/nn/gpt.hpp"

namespace tierzero::nn {

void init_gpt2_params(const ParamLayout& layout, const GPTConfig& config, uint64_t seed,
                      float* host_params) {
  std::memset(host_params, 0, layout.total_numel() * sizeof(float));
  Rng rng(seed);
  const double residual_std = 0.02 / std::sqrt(2.0 * static_cast<double>(config.num_layers));
  std::vector<float> full;  // (full numel) of a tensor held in part (tp > 1) or not at all
  for (const UnitDecl& unit : gpt_param_units(config))
    for (const TensorMeta& m : unit.tensors) {
      const ParamTensor* held = layout.find(m.kind, m.layer);
      const size_t n = m.full_shape.numel();
      const bool piece = held == nullptr || n != held->numel;
      if (piece) full.assign(n, 0.0f);
      float* p = piece ? full.data() : host_params + held->offset;
      switch (m.kind) {
        case ParamKind::ln1w:
        case ParamKind::ln2w:
        case ParamKind::lnfw:
          for (size_t i = 0; i < n; ++i) p[i] = 1.0f;
          break;
        case ParamKind::ln1b:
        case ParamKind::ln2b:
        case ParamKind::lnfb:
        case ParamKind::qkvb:
        case ParamKind::attprojb:
        case ParamKind::fcb:
        case ParamKind::fcprojb:
          break;  // zero
        case ParamKind::attprojw:
        case ParamKind::fcprojw:
          for (size_t i = 0; i < n; ++i) p[i] = static_cast<float>(residual_std * rng.normal());
          break;
        case ParamKind::wte:
        case ParamKind::wpe:
        case ParamKind::qkvw:
        case ParamKind::fcw:
          for (size_t i = 0; i < n; ++i) p[i] = static_cast<float>(0.02 * rng.normal());
          break;
      }
      if (piece && held)
        held->copy_local_piece(layout.tp(), full.data(), host_params + held->offset);
    }
}

}  // namespace tierzero::nn
