// Causal self-attention kernels against the double reference, on every backend. The backward
// scratch buffer is filled with NaN first: its contents are undefined on entry, so a kernel that
// reads it before writing would fail here.
#include <algorithm>
#include <limits>
#include <string>

#include "kernel_test_support.hpp"
#include "reference_kernels.hpp"
#include "tierzero/core/error.hpp"

namespace tierzero::test {
namespace {

class AttentionTest : public KernelTest {};
TZ_INSTANTIATE_BACKENDS(AttentionTest);

struct AttentionShape {
  size_t B, T, C, NH;
};
const AttentionShape kShapes[] = {
    {2, 7, 48, 4}, {1, 16, 64, 1}, {3, 13, 96, 6}, {2, 64, 768, 12}, {1, 1, 8, 2}};

std::string name(const char* what, const AttentionShape& s) {
  return std::string(what) + " B" + std::to_string(s.B) + " T" + std::to_string(s.T) + " C" +
         std::to_string(s.C) + " NH" + std::to_string(s.NH);
}

kernels::AttentionShape mha(const AttentionShape& s) {
  return kernels::AttentionShape::mha(s.B, s.T, s.C, s.NH);
}

TEST_P(AttentionTest, ForwardMatchesReference) {
  uint32_t seed = 700;
  for (const AttentionShape& s : kShapes) {
    // Standard deviation 1.5 makes the softmax rows peaked rather than near-uniform.
    const std::vector<float> qkv = random_normal(s.B * s.T * 3 * s.C, seed++, 1.5f);  // (B,T,3C)
    auto d_qkv = to_device(qkv);
    auto d_out = empty<float>(s.B * s.T * s.C);  // (B, T, C)
    auto d_saved = empty<float>(kernels().attention_saved_floats(mha(s)));
    kernels().attention_forward(d_out->get(), d_saved->get(), d_qkv->get(), mha(s));

    std::vector<double> out(s.B * s.T * s.C), att(s.B * s.NH * s.T * s.T);
    ref::attention_forward(out.data(), att.data(), widen(qkv).data(), s.B, s.T, s.C, s.NH);
    // fp32 dot products over hs and sums over T.
    expect_close(name("attention_forward out", s), d_out->download(), out, 1e-5);
  }
}

TEST_P(AttentionTest, BackwardWritesTheGradientWhole) {
  uint32_t seed = 800;
  for (const AttentionShape& s : kShapes) {
    const size_t n_qkv = s.B * s.T * 3 * s.C;
    const std::vector<float> qkv = random_normal(n_qkv, seed++, 1.5f);       // (B, T, 3C)
    const std::vector<float> dout = random_normal(s.B * s.T * s.C, seed++);  // (B, T, C)

    // What the backend's forward keeps (its output and saved state) is the backward's input.
    auto d_qkv = to_device(qkv);
    auto d_out = empty<float>(s.B * s.T * s.C);
    auto d_saved = empty<float>(kernels().attention_saved_floats(mha(s)));
    kernels().attention_forward(d_out->get(), d_saved->get(), d_qkv->get(), mha(s));
    auto d_dout = to_device(dout);
    // (B, T, 3C) NaN: the backward writes every element and reads none
    auto d_dqkv = to_device(std::vector<float>(n_qkv, std::numeric_limits<float>::quiet_NaN()));
    const size_t n_scratch = std::max<size_t>(kernels().attention_scratch_floats(mha(s)), 1);
    auto d_scratch =
        to_device(std::vector<float>(n_scratch, std::numeric_limits<float>::quiet_NaN()));
    kernels().attention_backward(d_dqkv->get(), d_scratch->get(), d_dout->get(), d_out->get(),
                                 d_qkv->get(), d_saved->get(), mha(s));

    std::vector<double> dqkv(n_qkv, 0.0);
    ref::attention_backward(dqkv.data(), widen(dout).data(), widen(qkv).data(), s.B, s.T, s.C,
                            s.NH);
    expect_close(name("attention_backward dqkv", s), d_dqkv->download(), dqkv, 1e-5);
  }
}

TEST_P(AttentionTest, RejectsKvHeadsThatDoNotDivideHeads) {
  if (!is_cpu()) GTEST_SKIP() << "argument errors are thrown by the CPU backend only";
  auto d_qkv = to_device(std::vector<float>(3 * 10, 0.0f));
  auto d_out = empty<float>(10);
  auto d_lse = empty<float>(3);
  const kernels::AttentionShape bad{1, 1, 3, 2, 2};  // 2 kv heads cannot serve 3 query heads
  EXPECT_THROW(kernels().attention_forward(d_out->get(), d_lse->get(), d_qkv->get(), bad),
               tierzero::Error);
}

}  // namespace
}  // namespace tierzero::test
