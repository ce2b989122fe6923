// A tiny GPT-2 on the CPU device with random tokens: the fixture the nn tests share.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "error_of.hpp"
#include "tierzero/core/error.hpp"

#include "tierzero/core/random.hpp"
#include "tierzero/device/device_allocator.hpp"
#include "tierzero/nn/gpt.hpp"

namespace tierzero::testing {

inline nn::GPTConfig tiny_config(size_t V, size_t Vp, size_t maxT, size_t L, size_t NH, size_t C) {
  nn::GPTConfig cfg;
  cfg.vocab_size = V;
  cfg.padded_vocab_size = Vp;
  cfg.max_seq_len = maxT;
  cfg.num_layers = L;
  cfg.num_heads = NH;
  cfg.channels = C;
  return cfg;
}

// working: the parameters' 16-bit working copy for 16-bit compute (LocalParams), fp32: none.
struct TinyGpt {
  TinyGpt(const nn::GPTConfig& config, size_t batch, size_t seq, uint64_t seed,
          DType working = DType::f32)
      : cfg(config),
        B(batch),
        T(seq),
        device(make_cpu_device()),
        alloc(*device, 0),
        model(cfg, alloc),
        params(model.layout(), alloc, working),
        x(B * T),
        y(B * T) {
    nn::init_gpt2_params(model.layout(), cfg, seed, params.params());
    params.round_working();
    Rng rng(seed + 1);
    for (size_t i = 0; i < B * T; ++i) {
      x[i] = static_cast<int32_t>(rng.below(cfg.vocab_size));
      y[i] = static_cast<int32_t>(rng.below(cfg.vocab_size));
    }
  }

  nn::GPTConfig cfg;
  size_t B, T;
  std::unique_ptr<Device> device;
  DeviceAllocator alloc;
  nn::GPT model;
  nn::LocalParams params;
  std::vector<int32_t> x, y;  // (B, T) inputs and targets
};

}  // namespace tierzero::testing
