// The per-micro-batch context: two micro-batches forwarded before either backward (as a
// pipeline schedule runs them) give bitwise the losses and gradients of running them one after
// the other, with and without activation checkpointing; the ParamProvider sees the documented
// call order; activation bytes add up per micro-batch in flight; misuse is refused clearly.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "recording_params.hpp"
#include "tierzero/core/error.hpp"
#include "tierzero/core/memory_tracker.hpp"
#include "tierzero/nn/gpt.hpp"
#include "tiny_gpt.hpp"

using namespace tierzero;
using tierzero::testing::RecordingParams;
using tierzero::testing::tiny_config;
using tierzero::testing::TinyGpt;

namespace {

struct Result {
  float loss[2];
  std::vector<float> grads;
  std::vector<std::string> calls;
};

// Micro-batch k of g's inputs: rows k * B/2 .. (k + 1) * B/2.
const int32_t* half(const std::vector<int32_t>& v, const TinyGpt& g, size_t k) {
  return v.data() + k * (g.B / 2) * g.T;
}

Result one_after_the_other(TinyGpt& g) {
  RecordingParams rec(g.params);
  g.params.zero_grads();
  Result r;
  for (size_t k = 0; k < 2; ++k) {
    nn::MicroBatch mb = g.model.make_micro_batch(g.B / 2, g.T);
    g.model.forward(mb, rec, half(g.x, g, k), half(g.y, g, k));
    g.model.backward(mb, rec, 0.5f);
    r.loss[k] = g.model.loss(mb);
  }
  r.grads.assign(g.params.grads(), g.params.grads() + g.params.numel());
  r.calls = rec.calls;
  return r;
}

Result both_in_flight(TinyGpt& g) {
  RecordingParams rec(g.params);
  g.params.zero_grads();
  Result r;
  nn::MicroBatch a = g.model.make_micro_batch(g.B / 2, g.T);
  nn::MicroBatch b = g.model.make_micro_batch(g.B / 2, g.T);
  g.model.forward(a, rec, half(g.x, g, 0), half(g.y, g, 0));
  const size_t forward_calls = rec.calls.size();
  g.model.forward(b, rec, half(g.x, g, 1), half(g.y, g, 1));
  g.model.backward(a, rec, 0.5f);
  g.model.backward(b, rec, 0.5f);
  r.loss[0] = g.model.loss(a);
  r.loss[1] = g.model.loss(b);
  r.grads.assign(g.params.grads(), g.params.grads() + g.params.numel());
  // Reorder the calls as forward a, backward a, forward b, backward b for the comparison.
  const size_t backward_calls = (rec.calls.size() - 2 * forward_calls) / 2;
  auto at = [&](size_t i) { return rec.calls.begin() + static_cast<long>(i); };
  r.calls.insert(r.calls.end(), at(0), at(forward_calls));
  r.calls.insert(r.calls.end(), at(2 * forward_calls), at(2 * forward_calls + backward_calls));
  r.calls.insert(r.calls.end(), at(forward_calls), at(2 * forward_calls));
  r.calls.insert(r.calls.end(), at(2 * forward_calls + backward_calls), rec.calls.end());
  return r;
}

}  // namespace

TEST(MicroBatches, TwoInFlightEqualOneAfterTheOther) {
  const nn::GPTConfig cfg = tiny_config(50, 64, 16, 3, 2, 32);
  for (bool checkpointing : {false, true}) {
    SCOPED_TRACE(checkpointing ? "checkpointing" : "no checkpointing");
    TinyGpt seq(cfg, 4, 12, 31), par(cfg, 4, 12, 31);
    seq.model.set_activation_checkpointing(checkpointing);
    par.model.set_activation_checkpointing(checkpointing);
    const Result s = one_after_the_other(seq);
    const Result p = both_in_flight(par);
    for (size_t k = 0; k < 2; ++k)
      EXPECT_EQ(std::memcmp(&s.loss[k], &p.loss[k], sizeof(float)), 0)
          << "micro-batch " << k << ": " << s.loss[k] << " vs " << p.loss[k];
    EXPECT_NE(s.loss[0], s.loss[1]) << "the two micro-batches hold different tokens";
    double max_abs = 0.0;
    for (size_t i = 0; i < s.grads.size(); ++i)
      max_abs = std::max(max_abs, std::fabs(double{s.grads[i]} - double{p.grads[i]}));
    std::printf("%s: in flight together vs one after the other: max |dgrad| %.3g\n",
                checkpointing ? "checkpointing" : "plain", max_abs);
    EXPECT_EQ(std::memcmp(s.grads.data(), p.grads.data(), s.grads.size() * sizeof(float)), 0);
    EXPECT_EQ(s.calls, p.calls);

    // The facade, twice with grad_scale 0.5, is the same computation.
    TinyGpt fac(cfg, 4, 12, 31);
    fac.model.set_activation_checkpointing(checkpointing);
    fac.params.zero_grads();
    for (size_t k = 0; k < 2; ++k) {
      const float l = fac.model.forward_backward(fac.params, half(fac.x, fac, k),
                                                 half(fac.y, fac, k), fac.B / 2, fac.T, 0.5f);
      EXPECT_EQ(std::memcmp(&l, &s.loss[k], sizeof(float)), 0);
    }
    EXPECT_EQ(std::memcmp(fac.params.grads(), s.grads.data(), s.grads.size() * sizeof(float)), 0);
  }
}

TEST(MicroBatches, ParamProviderCallOrder) {
  // Units: 0 embeddings, 1..2 blocks, 3 final_norm. The head uses unit 0 again.
  const std::vector<std::string> forward = {
      "acquire_params 0", "release_params 0",  // embedding
      "acquire_params 1", "release_params 1",  // block 0
      "acquire_params 2", "release_params 2",  // block 1
      "acquire_params 3", "release_params 3",  // final norm
      "acquire_params 0", "release_params 0",  // tied head
  };
  const std::vector<std::string> backward = {
      "acquire_params 0", "acquire_grads 0", "release_params 0",                  // head
      "acquire_params 3", "acquire_grads 3", "release_params 3", "grads_done 3",  // final norm
      "acquire_params 2", "acquire_grads 2", "release_params 2", "grads_done 2",  // block 1
      "acquire_params 1", "acquire_grads 1", "release_params 1", "grads_done 1",  // block 0
      "acquire_grads 0",  "grads_done 0",                                         // embedding
  };
  for (bool checkpointing : {false, true}) {
    TinyGpt g(tiny_config(50, 64, 16, 2, 2, 32), 2, 8, 3);
    g.model.set_activation_checkpointing(checkpointing);
    RecordingParams rec(g.params);
    nn::MicroBatch mb = g.model.make_micro_batch(g.B, g.T);
    g.model.forward(mb, rec, g.x.data(), g.y.data());
    EXPECT_EQ(rec.calls, forward) << "checkpointing " << checkpointing;
    rec.calls.clear();
    g.model.backward(mb, rec, 1.0f);
    EXPECT_EQ(rec.calls, backward) << "checkpointing " << checkpointing;
  }
}

TEST(MicroBatches, ModulesInForwardOrderWithTheirUnits) {
  TinyGpt g(tiny_config(50, 64, 16, 2, 2, 32), 2, 8, 3);
  const nn::ModuleList& m = g.model.modules();
  const std::vector<std::string> names = {"embeddings", "block.0", "block.1", "final_norm", "head"};
  const std::vector<size_t> units = {0, 1, 2, 3, 0};
  ASSERT_EQ(m.size(), names.size());
  for (size_t i = 0; i < m.size(); ++i) {
    EXPECT_EQ(m[i]->name(), names[i]);
    EXPECT_EQ(m[i]->index(), i);
    EXPECT_EQ(m[i]->unit(), units[i]) << names[i];
    EXPECT_EQ(g.model.layout().units()[m[i]->unit()].name, m[i]->unit_name());
  }
  EXPECT_TRUE(m.back()->parameters().empty()) << "the tied head owns no parameters";
}

TEST(MicroBatches, ActivationBytesAddUpPerMicroBatchInFlight) {
  const nn::GPTConfig cfg = tiny_config(100, 128, 32, 3, 4, 64);
  const size_t B = 3, T = 17;
  for (bool checkpointing : {false, true}) {
    MemoryTracker tracker;
    auto device = make_cpu_device();
    DeviceAllocator alloc(*device, 0, tracker);
    nn::GPT model(cfg, alloc);
    model.set_activation_checkpointing(checkpointing);
    nn::LocalParams params(model.layout(), alloc);
    nn::init_gpt2_params(model.layout(), cfg, 3, params.params());
    std::vector<int32_t> x(B * T);
    for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<int32_t>(i % cfg.vocab_size);
    nn::MicroBatch a = model.make_micro_batch(B, T);
    nn::MicroBatch b = model.make_micro_batch(B, T);
    model.forward(a, params, x.data(), x.data());
    model.forward(b, params, x.data(), x.data());
    const size_t one = nn::GPT::micro_batch_bytes_for(cfg, B, T, checkpointing);
    const size_t scratch = nn::GPT::scratch_bytes_for(cfg, B, T, checkpointing);
    EXPECT_EQ(a.activation_bytes(), one);
    EXPECT_EQ(tracker.current(Tier::device, Category::activation), scratch + 2 * one);
    EXPECT_EQ(nn::GPT::activation_bytes_for(cfg, B, T, checkpointing), scratch + one);
    std::printf("checkpointing %d: %zu bytes per micro-batch, %zu of shared scratch\n",
                checkpointing ? 1 : 0, one, scratch);
  }
}

TEST(MicroBatches, MisuseIsRefused) {
  TinyGpt g(tiny_config(50, 64, 16, 2, 2, 32), 2, 8, 3);
  nn::MicroBatch mb = g.model.make_micro_batch(g.B, g.T);
  EXPECT_THROW(g.model.backward(mb, g.params, 1.0f), Error) << "backward before forward";
  EXPECT_THROW(g.model.loss(mb), Error) << "loss before forward";
  g.model.forward(mb, g.params, g.x.data(), nullptr);
  EXPECT_THROW(g.model.backward(mb, g.params, 1.0f), Error) << "backward without targets";
  g.model.forward(mb, g.params, g.x.data(), g.y.data());
  g.model.backward(mb, g.params, 1.0f);
  EXPECT_THROW(g.model.backward(mb, g.params, 1.0f), Error) << "a second backward";
  EXPECT_THROW(g.model.make_micro_batch(1, 17), Error) << "past the context length";
  g.model.set_activation_checkpointing(true);
  try {
    g.model.forward(mb, g.params, g.x.data(), g.y.data());
    ADD_FAILURE() << "a micro-batch from before the checkpointing change ran";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("activation checkpointing off"), std::string::npos)
        << e.what();
  }
}
