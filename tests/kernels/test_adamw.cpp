// AdamW against a double reference run side by side for several steps, on every backend, with
// PyTorch's semantics (decoupled weight decay, bias correction, eps outside the square root).
// Some gradients are always zero (m = v = 0, where eps alone keeps the update finite) and some
// are tiny (sqrt(v_hat) comparable to eps).
#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "kernel_test_support.hpp"
#include "reference_kernels.hpp"
#include "tierzero/core/error.hpp"

namespace tierzero::test {
namespace {

class AdamWTest : public KernelTest {};
TZ_INSTANTIATE_BACKENDS(AdamWTest);

struct AdamWCase {
  const char* label;
  kernels::AdamWParams params;  // step is the first step; later steps count up from it
  int steps;
};

TEST_P(AdamWTest, MatchesDoubleReferenceOverSteps) {
  const AdamWCase cases[] = {
      {"gpt2", {1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.7f, 1}, 6},
      {"late", {3e-3f, 0.9f, 0.999f, 1e-6f, 0.0f, 1.0f, 1000}, 4},
  };
  const size_t n = 10007;
  uint32_t seed = 1700;
  for (const AdamWCase& c : cases) {
    std::vector<float> param = random_normal(n, seed++);  // (n)
    std::vector<float> m(n, 0.0f), v(n, 0.0f);            // (n) each, fresh optimizer state
    auto d_param = to_device(param);
    auto d_m = to_device(m);
    auto d_v = to_device(v);
    auto d_grad = empty<float>(n);  // (n)
    std::vector<double> param_ref = widen(param), m_ref(n, 0.0), v_ref(n, 0.0);

    for (int step = 0; step < c.steps; ++step) {
      std::vector<float> grad = random_normal(n, seed++);  // (n)
      for (size_t i = 0; i < n; i += 97) grad[i] = 0.0f;
      for (size_t i = 1; i < n; i += 89) grad[i] *= 1e-7f;
      d_grad->upload(grad);
      kernels::AdamWParams p = c.params;
      p.step = c.params.step + step;
      kernels().adamw_update(d_param->get(), d_m->get(), d_v->get(), d_grad->get(), n, p);

      const ref::AdamW rp{static_cast<double>(p.lr),
                          static_cast<double>(p.beta1),
                          static_cast<double>(p.beta2),
                          static_cast<double>(p.eps),
                          static_cast<double>(p.weight_decay),
                          static_cast<double>(p.grad_scale),
                          p.step};
      ref::adamw_update(param_ref.data(), m_ref.data(), v_ref.data(), widen(grad).data(), n, rp);
    }
    // Each step rounds every state once in fp32; errors add up over the steps.
    const std::string label =
        std::string("adamw ") + c.label + " after " + std::to_string(c.steps) + " steps";
    expect_close(label + " param", d_param->download(), param_ref, 1e-6);
    expect_close(label + " m", d_m->download(), m_ref, 1e-6);
    expect_close(label + " v", d_v->download(), v_ref, 1e-6);
  }
}

// The update that writes the 16-bit working parameters in its own pass gives, bit for bit, the
// update followed by a separate conversion (the path it replaces), in every copy type, for
// param, m, v and the copy, over steps with zero and tiny gradients.
TEST_P(AdamWTest, WithCopyIsTheUpdateThenTheConversion) {
  const size_t n = 10007;
  for (DType type : {DType::bf16, DType::f16, DType::f32}) {
    const size_t words = n * dtype_size(type) / 2;  // the copy as 16-bit words
    uint32_t seed = 4100;
    const std::vector<float> param = random_normal(n, seed++);  // (n)
    const std::vector<float> zeros(n, 0.0f);                    // (n)
    auto p1 = to_device(param), m1 = to_device(zeros), v1 = to_device(zeros);
    auto p2 = to_device(param), m2 = to_device(zeros), v2 = to_device(zeros);
    auto c1 = empty<uint16_t>(words), c2 = empty<uint16_t>(words);  // (n) type each
    auto d_grad = empty<float>(n);                                  // (n)
    for (int step = 1; step <= 3; ++step) {
      std::vector<float> grad = random_normal(n, seed++);  // (n)
      for (size_t i = 0; i < n; i += 97) grad[i] = 0.0f;
      for (size_t i = 1; i < n; i += 89) grad[i] *= 1e-7f;
      d_grad->upload(grad);
      const kernels::AdamWParams p{1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.7f, step};
      kernels().adamw_update(p1->get(), m1->get(), v1->get(), d_grad->get(), n, p);
      kernels().convert_from_f32(c1->get(), type, p1->get(), n);
      const kernels::AdamWSegment whole{0, n, p.weight_decay};
      kernels().adamw_update_segments(p2->get(), m2->get(), v2->get(), d_grad->get(), c2->get(),
                                      type, &whole, 1, p);
    }
    const std::string what = std::string("adamw with a ") + dtype_name(type) + " copy";
    size_t differ = 0;
    const std::vector<float> a[3] = {p1->download(), m1->download(), v1->download()};
    const std::vector<float> b[3] = {p2->download(), m2->download(), v2->download()};
    for (int t = 0; t < 3; ++t)
      for (size_t i = 0; i < n; ++i) differ += std::memcmp(&a[t][i], &b[t][i], sizeof(float)) != 0;
    const std::vector<uint16_t> ca = c1->download(), cb = c2->download();
    for (size_t i = 0; i < words; ++i) differ += ca[i] != cb[i];
    std::printf("%s: %zu of %zu words differ from the update then the conversion\n", what.c_str(),
                differ, 3 * n + words);
    EXPECT_EQ(differ, 0u) << what;
  }
}

// A whole unit's update in one call: 150 segments (133 not empty: three CUDA launches of 64) of
// varying lengths, some empty, with gaps between them (a shard's padding) and alternating weight
// decay, gives bit for bit the per-segment calls (each followed by the conversion, with a copy);
// the gaps stay untouched.
TEST_P(AdamWTest, SegmentsAreThePerSegmentCalls) {
  std::vector<kernels::AdamWSegment> segments;
  size_t at = 3;
  for (size_t i = 0; i < 150; ++i) {
    const size_t count = i % 9 == 4 ? 0 : 1 + (i * 37) % 211;
    segments.push_back({at, count, i % 2 == 0 ? 0.1f : 0.0f});
    at += count + i % 3;  // a gap after some
  }
  const size_t n = at + 5;
  for (DType type : {DType::f32, DType::bf16}) {
    const bool with_copy = type == DType::bf16;  // f32 here: no copy at all
    uint32_t seed = 5200;
    const std::vector<float> param = random_normal(n, seed++);  // (n)
    const std::vector<float> half = random_normal(n, seed++);   // (n) nonzero moments
    std::vector<float> sq(n);                                   // (n)
    for (size_t i = 0; i < n; ++i) sq[i] = half[i] * half[i];
    auto p1 = to_device(param), m1 = to_device(half), v1 = to_device(sq);
    auto p2 = to_device(param), m2 = to_device(half), v2 = to_device(sq);
    auto c1 = to_device(std::vector<uint16_t>(n, 7)), c2 = to_device(std::vector<uint16_t>(n, 7));
    auto d_grad = to_device(random_normal(n, seed++));  // (n)
    const kernels::AdamWParams p{1e-2f, 0.9f, 0.95f, 1e-8f, 0.5f, 0.7f, 3};
    kernels().adamw_update_segments(p1->get(), m1->get(), v1->get(), d_grad->get(),
                                    with_copy ? c1->get() : nullptr, type, segments.data(),
                                    segments.size(), p);
    for (const kernels::AdamWSegment& seg : segments) {
      kernels::AdamWParams ps = p;
      ps.weight_decay = seg.weight_decay;
      const size_t o = seg.offset;
      kernels().adamw_update(p2->get() + o, m2->get() + o, v2->get() + o, d_grad->get() + o,
                             seg.count, ps);
      if (with_copy) kernels().convert_from_f32(c2->get() + o, type, p2->get() + o, seg.count);
    }
    size_t differ = 0, gaps_changed = 0;
    const std::vector<float> a[3] = {p1->download(), m1->download(), v1->download()};
    const std::vector<float> b[3] = {p2->download(), m2->download(), v2->download()};
    for (int t = 0; t < 3; ++t)
      for (size_t i = 0; i < n; ++i) differ += std::memcmp(&a[t][i], &b[t][i], sizeof(float)) != 0;
    const std::vector<uint16_t> ca = c1->download(), cb = c2->download();
    for (size_t i = 0; i < n; ++i) differ += ca[i] != cb[i];
    std::vector<char> covered(n, 0);
    for (const kernels::AdamWSegment& seg : segments)
      std::fill(covered.begin() + static_cast<std::ptrdiff_t>(seg.offset),
                covered.begin() + static_cast<std::ptrdiff_t>(seg.offset + seg.count), 1);
    for (size_t i = 0; i < n; ++i)
      if (!covered[i]) gaps_changed += a[0][i] != param[i] || ca[i] != 7;
    std::printf(
        "adamw over 150 segments, %s: %zu of %zu words differ from the per-segment calls; "
        "%zu gap elements changed\n",
        with_copy ? "bf16 copy" : "no copy", differ, 4 * n, gaps_changed);
    EXPECT_EQ(differ, 0u);
    EXPECT_EQ(gaps_changed, 0u);
  }
}

TEST_P(AdamWTest, RejectsStepZero) {
  if (!is_cpu()) GTEST_SKIP() << "argument errors are thrown by the CPU backend only";
  auto d = to_device(std::vector<float>(4, 0.0f));
  const kernels::AdamWParams p{1e-3f, 0.9f, 0.999f, 1e-8f, 0.0f, 1.0f, 0};
  EXPECT_THROW(kernels().adamw_update(d->get(), d->get(), d->get(), d->get(), 4, p),
               tierzero::Error);
}

}  // namespace
}  // namespace tierzero::test
