// 16-bit training's embedding and classifier, Kernels::encoder16_forward,
// softmax_xent16_forward_backward and vocab_xent16_finish, on every backend: the embedding gives
// the bits of encoder_forward_vocab_range on the widened rows (whole vocabulary and one rank's
// range, with and without positions, tokens outside the range); the classifier the bits of the
// fp32 op followed by convert_from_f32 for the gradient, and the fp32 op's losses. Both CUDA forms
// are the fp32 kernels instantiated for 16-bit types, so the bits hold there too. The fp32 ops
// themselves are held to the double reference in test_encoder.cpp, test_softmax_xent.cpp and
// test_vocab_parallel.cpp.
#include <string>

#include "kernel_test_support.hpp"
#include "tierzero/core/dtype.hpp"
#include "tierzero/core/error.hpp"

namespace tierzero::test {
namespace {

class Classifier16Test : public KernelTest {};
TZ_INSTANTIATE_BACKENDS(Classifier16Test);

const DType kTypes[] = {DType::bf16, DType::f16};

TEST_P(Classifier16Test, EmbeddingIsTheFp32OpOnWidenedRows) {
  struct Case {
    size_t B, T, C, vocab_start, vocab_count;
    int32_t vocab;  // tokens drawn below this
    bool positions;
  };
  const Case cases[] = {{2, 7, 48, 0, 64, 64, true},
                        {3, 5, 13, 10, 9, 40, true},
                        {1, 9, 100, 3, 20, 30, false},
                        {2, 4, 1, 0, 5, 5, true}};
  uint32_t seed = 4000;
  for (DType type : kTypes)
    for (const Case& c : cases) {
      const size_t n = c.B * c.T * c.C;
      const Rounded wte = rounded(random_normal(c.vocab_count * c.C, seed++), type);
      const Rounded wpe = rounded(random_normal(c.T * c.C, seed++), type);
      auto d_tokens = to_device(random_tokens(c.B * c.T, seed++, c.vocab));
      auto d_wte16 = to_device(wte.bits), d_wpe16 = to_device(wpe.bits);
      auto d_wte = to_device(wte.values), d_wpe = to_device(wpe.values);
      auto out = to_device(poison(n)), out32 = to_device(poison(n));
      kernels().encoder16_forward(out->get(), d_tokens->get(), d_wte16->get(),
                                  c.positions ? d_wpe16->get() : nullptr, type, c.vocab_start,
                                  c.vocab_count, c.B, c.T, c.C);
      kernels().encoder_forward_vocab_range(out32->get(), d_tokens->get(), d_wte->get(),
                                            c.positions ? d_wpe->get() : nullptr, c.vocab_start,
                                            c.vocab_count, c.B, c.T, c.C);
      EXPECT_TRUE(same_bits(out->download(), out32->download()))
          << "encoder16_forward " << dtype_name(type) << " B" << c.B << " T" << c.T << " C" << c.C
          << " range " << c.vocab_start << "+" << c.vocab_count;
    }
}

TEST_P(Classifier16Test, SoftmaxXentGradientIsTheFp32OpRounded) {
  struct Case {
    size_t N, V, Vp;
  };
  const Case cases[] = {{7, 40, 64}, {5, 1000, 1024}, {3, 13, 13}, {1, 50257, 50304}};
  uint32_t seed = 4100;
  for (DType type : kTypes)
    for (const Case& c : cases) {
      const std::vector<float> logits = random_normal(c.N * c.Vp, seed++, 3.0f);  // (N, Vp)
      auto d_logits = to_device(logits);
      auto d_targets = to_device(random_tokens(c.N, seed++, static_cast<int32_t>(c.V)));
      auto dlogits = to_device(poison(c.N * c.Vp)), losses = to_device(poison(c.N));
      const float dloss = 1.0f / static_cast<float>(c.N);
      kernels().softmax_xent16_forward_backward(dlogits->get(), losses->get(), d_logits->get(),
                                                d_targets->get(), type, dloss, c.N, c.V, c.Vp);
      auto dlogits32 = empty<float>(c.N * c.Vp), losses32 = empty<float>(c.N);
      kernels().softmax_xent_forward_backward(dlogits32->get(), losses32->get(), d_logits->get(),
                                              d_targets->get(), dloss, c.N, c.V, c.Vp);
      auto rounded_grad = to_device(poison(c.N * c.Vp));
      kernels().convert_from_f32(rounded_grad->get(), type, dlogits32->get(), c.N * c.Vp);
      const std::string at = std::string(dtype_name(type)) + " N" + std::to_string(c.N) + " V" +
                             std::to_string(c.V) + " Vp" + std::to_string(c.Vp);
      EXPECT_TRUE(same_bits(dlogits->download(), rounded_grad->download()))
          << "softmax_xent16 dlogits " << at;
      EXPECT_TRUE(same_bits(losses->download(), losses32->download()))
          << "softmax_xent16 losses " << at;
      // The logits, read as fp32, are untouched (the gradient has its own buffer).
      EXPECT_TRUE(same_bits(d_logits->download(), logits)) << "softmax_xent16 logits " << at;
    }
}

// Two ranks' halves of a padded vocabulary: each rank's partials, all-gathered, then each
// rank's finish in 16 bits against the fp32 finish rounded.
TEST_P(Classifier16Test, VocabParallelGradientIsTheFp32OpRounded) {
  const size_t N = 6, V = 90, Vl = 48, ranks = 2;
  uint32_t seed = 4200;
  for (DType type : kTypes) {
    std::vector<std::unique_ptr<DeviceArray<float>>> logits;  // (N, Vl) per rank
    auto d_targets = to_device(random_tokens(N, seed++, static_cast<int32_t>(V)));
    auto all = empty<float>(ranks * N * 3);  // (ranks, N, 3)
    for (size_t r = 0; r < ranks; ++r) {
      logits.push_back(to_device(random_normal(N * Vl, seed++, 3.0f)));
      auto partials = empty<float>(N * 3);
      kernels().vocab_xent_partials(partials->get(), logits[r]->get(), d_targets->get(), N, Vl,
                                    r * Vl, V);
      const std::vector<float> p = partials->download();
      std::vector<float> gathered = all->download();
      std::copy(p.begin(), p.end(), gathered.begin() + static_cast<std::ptrdiff_t>(r * N * 3));
      all->upload(gathered);
    }
    for (size_t r = 0; r < ranks; ++r) {
      auto dlogits = to_device(poison(N * Vl)), losses = to_device(poison(N));
      kernels().vocab_xent16_finish(dlogits->get(), losses->get(), logits[r]->get(), all->get(),
                                    ranks, d_targets->get(), type, 0.5f, N, Vl, r * Vl, V);
      auto dlogits32 = empty<float>(N * Vl), losses32 = empty<float>(N);
      kernels().vocab_xent_finish(dlogits32->get(), losses32->get(), logits[r]->get(), all->get(),
                                  ranks, d_targets->get(), 0.5f, N, Vl, r * Vl, V);
      auto rounded_grad = to_device(poison(N * Vl));
      kernels().convert_from_f32(rounded_grad->get(), type, dlogits32->get(), N * Vl);
      EXPECT_TRUE(same_bits(dlogits->download(), rounded_grad->download()))
          << "vocab_xent16_finish dlogits " << dtype_name(type) << " rank " << r;
      EXPECT_TRUE(same_bits(losses->download(), losses32->download()))
          << "vocab_xent16_finish losses " << dtype_name(type) << " rank " << r;
    }
  }
}

TEST_P(Classifier16Test, RefusesOtherTypes) {
  auto x = to_device(poison(16));
  auto tokens = to_device(std::vector<int32_t>(2, 0));
  float* f = x->get();
  try {
    kernels().softmax_xent16_forward_backward(f, f, f, tokens->get(), DType::f32, 1.0f, 1, 2, 2);
    ADD_FAILURE() << "softmax_xent16_forward_backward accepted fp32";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("softmax_xent16_forward_backward: operands of type fp32"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(kernels().encoder16_forward(f, tokens->get(), f, nullptr, DType::f32, 0, 2, 1, 2, 1),
               Error);
  // The 16-bit gradient in place over the fp32 logits (anywhere in them), or missing.
  for (void* grad : {static_cast<void*>(f), static_cast<void*>(f + 3)}) {
    try {
      kernels().softmax_xent16_forward_backward(grad, f + 12, f, tokens->get(), DType::bf16, 1.0f,
                                                2, 2, 4);
      ADD_FAILURE() << "a 16-bit gradient over the logits was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("overlaps the fp32 logits"), std::string::npos)
          << e.what();
    }
  }
  EXPECT_THROW(kernels().vocab_xent16_finish(nullptr, f + 12, f, f, 1, tokens->get(), DType::bf16,
                                             1.0f, 2, 4, 0, 4),
               Error);
  EXPECT_TRUE(same_bits(x->download(), poison(16))) << "a refused call wrote";
}

}  // namespace
}  // namespace tierzero::test
