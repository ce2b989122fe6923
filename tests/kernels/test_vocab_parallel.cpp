// Vocabulary-parallel kernels (tensor parallelism) on every backend: the range encoder against
// the whole-vocabulary encoder and the double reference, split over 2 and 3 ranks and put back
// together; and the two-pass cross-entropy split over 1, 2 and 4 ranks (one of which may hold
// only padding columns) against the double reference and the whole-vocabulary kernel. Each rank
// is run in turn on the one device, its partials written to its slot of the (ranks, N, 3)
// buffer as an all-gather would.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <iterator>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "kernel_test_support.hpp"
#include "reference_kernels.hpp"
#include "tierzero/core/error.hpp"

namespace tierzero::test {
namespace {

class VocabEncoderTest : public KernelTest {};
TZ_INSTANTIATE_BACKENDS(VocabEncoderTest);
class VocabXentTest : public KernelTest {};
TZ_INSTANTIATE_BACKENDS(VocabXentTest);

// One rank's share of the padded vocabulary: rows of wte or columns of the logits.
struct Range {
  size_t start, count;
};
std::vector<Range> split(size_t Vp, size_t ranks) {
  std::vector<Range> out;
  for (size_t r = 0; r < ranks; ++r) out.push_back({r * (Vp / ranks), Vp / ranks});
  return out;
}

// Rows [start, start + count) of a (rows, C) matrix.
std::vector<float> rows_of(const std::vector<float>& m, size_t C, Range r) {
  return {m.begin() + static_cast<ptrdiff_t>(r.start * C),
          m.begin() + static_cast<ptrdiff_t>((r.start + r.count) * C)};
}
// Columns [start, start + count) of a (N, cols) matrix, as a (N, count) matrix.
std::vector<float> columns_of(const std::vector<float>& m, size_t N, size_t cols, Range r) {
  std::vector<float> out(N * r.count);
  for (size_t n = 0; n < N; ++n)
    for (size_t i = 0; i < r.count; ++i) out[n * r.count + i] = m[n * cols + r.start + i];
  return out;
}
// Writes a (N, count) matrix into columns [start, start + count) of a (N, cols) matrix.
void put_columns(std::vector<float>& m, size_t N, size_t cols, Range r,
                 const std::vector<float>& part) {
  for (size_t n = 0; n < N; ++n)
    for (size_t i = 0; i < r.count; ++i) m[n * cols + r.start + i] = part[n * r.count + i];
}

// Prints the errors like expect_close (they are 0 when it passes) and demands the same bits.
void expect_bitwise(const std::string& label, const std::vector<float>& got,
                    const std::vector<float>& want) {
  expect_close(label, got, widen(want), 0.0);
  ASSERT_EQ(got.size(), want.size()) << label;
  EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0)
      << label << ": not bitwise equal";
}

// ---- encoder ----

struct EncoderShape {
  size_t B, T, C, Vp, maxT;
};
std::string name(const char* what, const EncoderShape& s, size_t ranks = 1) {
  return std::string(what) + " B" + std::to_string(s.B) + " T" + std::to_string(s.T) + " C" +
         std::to_string(s.C) + " Vp" + std::to_string(s.Vp) + " ranks" + std::to_string(ranks);
}

TEST_P(VocabEncoderTest, FullRangeMatchesEncoder) {
  const EncoderShape shapes[] = {
      {2, 7, 48, 5, 9}, {3, 5, 130, 11, 5}, {4, 64, 768, 67, 64}, {1, 1, 1, 2, 1}};
  uint32_t seed = 2100;
  for (const EncoderShape& s : shapes) {
    const size_t n = s.B * s.T * s.C;
    const std::vector<float> wte = random_normal(s.Vp * s.C, seed++);      // (Vp, C)
    const std::vector<float> wpe = random_normal(s.maxT * s.C, seed++);    // (maxT, C)
    const std::vector<float> dout = random_normal(n, seed++);              // (B, T, C)
    const std::vector<float> dwte0 = random_normal(s.Vp * s.C, seed++);    // (Vp, C) prior grads
    const std::vector<float> dwpe0 = random_normal(s.maxT * s.C, seed++);  // (maxT, C)
    const std::vector<int32_t> tokens =
        random_tokens(s.B * s.T, seed++, static_cast<int32_t>(s.Vp));  // (B, T)
    auto d_wte = to_device(wte);
    auto d_wpe = to_device(wpe);
    auto d_dout = to_device(dout);
    auto d_tokens = to_device(tokens);

    auto d_out_range = empty<float>(n);  // (B, T, C)
    auto d_out_full = empty<float>(n);   // (B, T, C)
    kernels().encoder_forward_vocab_range(d_out_range->get(), d_tokens->get(), d_wte->get(),
                                          d_wpe->get(), 0, s.Vp, s.B, s.T, s.C);
    kernels().encoder_forward(d_out_full->get(), d_tokens->get(), d_wte->get(), d_wpe->get(), s.B,
                              s.T, s.C);
    std::vector<double> out(n);
    ref::encoder_forward(out.data(), tokens.data(), widen(wte).data(), widen(wpe).data(), s.B, s.T,
                         s.C);
    const std::vector<float> out_range = d_out_range->download();
    expect_close(name("range forward vs reference", s), out_range, out, 1e-6);
    // One fp32 addition per element on both backends.
    expect_bitwise(name("range forward vs encoder_forward", s), out_range, d_out_full->download());

    auto d_dwte_range = to_device(dwte0);
    auto d_dwpe_range = to_device(dwpe0);
    auto d_dwte_full = to_device(dwte0);
    auto d_dwpe_full = to_device(dwpe0);
    kernels().encoder_backward_vocab_range(d_dwte_range->get(), d_dwpe_range->get(), d_dout->get(),
                                           d_tokens->get(), 0, s.Vp, s.B, s.T, s.C);
    kernels().encoder_backward(d_dwte_full->get(), d_dwpe_full->get(), d_dout->get(),
                               d_tokens->get(), s.B, s.T, s.C);
    std::vector<double> dwte(s.Vp * s.C, 0.0), dwpe(s.maxT * s.C, 0.0);
    ref::encoder_backward(dwte.data(), dwpe.data(), widen(dout).data(), tokens.data(), s.B, s.T,
                          s.C);
    const std::vector<float> dwte_range = d_dwte_range->download();
    const std::vector<float> dwpe_range = d_dwpe_range->download();
    expect_close(name("range backward dwte vs reference", s), dwte_range, plus(dwte0, dwte), 1e-6);
    expect_close(name("range backward dwpe vs reference", s), dwpe_range, plus(dwpe0, dwpe), 1e-6);
    if (is_cpu()) {  // the CUDA scatter-add uses atomics: its order varies from run to run
      expect_bitwise(name("range backward dwte vs encoder_backward", s), dwte_range,
                     d_dwte_full->download());
      expect_bitwise(name("range backward dwpe vs encoder_backward", s), dwpe_range,
                     d_dwpe_full->download());
    }
  }
}

TEST_P(VocabEncoderTest, SplitRangesSumToFull) {
  const EncoderShape s{3, 11, 40, 96, 13};
  const size_t n = s.B * s.T * s.C;
  uint32_t seed = 2200;
  const std::vector<float> wte = random_normal(s.Vp * s.C, seed++);      // (Vp, C)
  const std::vector<float> wpe = random_normal(s.maxT * s.C, seed++);    // (maxT, C)
  const std::vector<float> dout = random_normal(n, seed++);              // (B, T, C)
  const std::vector<float> dwte0 = random_normal(s.Vp * s.C, seed++);    // (Vp, C) prior grads
  const std::vector<float> dwpe0 = random_normal(s.maxT * s.C, seed++);  // (maxT, C)
  std::vector<int32_t> tokens =
      random_tokens(s.B * s.T, seed++, static_cast<int32_t>(s.Vp));  // (B, T)
  // Both edges of every range of 2 and of 3 ranks, and a repeat.
  const int32_t edges[] = {0, 95, 47, 48, 31, 32, 63, 64, 0};
  for (size_t i = 0; i < std::size(edges); ++i) tokens[i * 3] = edges[i];
  auto d_wpe = to_device(wpe);
  auto d_dout = to_device(dout);
  auto d_tokens = to_device(tokens);

  auto d_out_full = empty<float>(n);  // (B, T, C)
  auto d_dwte_full = to_device(dwte0);
  auto d_dwpe_full = to_device(dwpe0);
  {
    auto d_wte = to_device(wte);
    kernels().encoder_forward(d_out_full->get(), d_tokens->get(), d_wte->get(), d_wpe->get(), s.B,
                              s.T, s.C);
    kernels().encoder_backward(d_dwte_full->get(), d_dwpe_full->get(), d_dout->get(),
                               d_tokens->get(), s.B, s.T, s.C);
  }
  const std::vector<float> out_full = d_out_full->download();
  std::vector<double> dwte(s.Vp * s.C, 0.0), dwpe(s.maxT * s.C, 0.0);
  ref::encoder_backward(dwte.data(), dwpe.data(), widen(dout).data(), tokens.data(), s.B, s.T, s.C);

  for (size_t ranks : {2, 3}) {
    std::vector<float> out_sum(n, 0.0f);      // (B, T, C) the all-reduce, in rank order
    std::vector<float> dwte_cat(s.Vp * s.C);  // (Vp, C) the pieces in rank order
    auto d_dwpe = to_device(dwpe0);           // (maxT, C) given to rank 0 only
    for (size_t r = 0; r < ranks; ++r) {
      const Range range = split(s.Vp, ranks)[r];
      auto d_wte_local = to_device(rows_of(wte, s.C, range));     // (count, C)
      auto d_dwte_local = to_device(rows_of(dwte0, s.C, range));  // (count, C)
      auto d_out = empty<float>(n);                               // (B, T, C)
      kernels().encoder_forward_vocab_range(d_out->get(), d_tokens->get(), d_wte_local->get(),
                                            r == 0 ? d_wpe->get() : nullptr, range.start,
                                            range.count, s.B, s.T, s.C);
      kernels().encoder_backward_vocab_range(d_dwte_local->get(), r == 0 ? d_dwpe->get() : nullptr,
                                             d_dout->get(), d_tokens->get(), range.start,
                                             range.count, s.B, s.T, s.C);
      const std::vector<float> out = d_out->download();
      for (size_t i = 0; i < n; ++i) out_sum[i] += out[i];
      const std::vector<float> piece = d_dwte_local->download();
      std::copy(piece.begin(), piece.end(),
                dwte_cat.begin() + static_cast<ptrdiff_t>(range.start * s.C));
    }
    // Each element sums wpe, one wte entry and zeros: exact, on both backends.
    expect_bitwise(name("split forward sum vs encoder_forward", s, ranks), out_sum, out_full);
    const std::vector<float> dwpe_split = d_dwpe->download();
    expect_close(name("split backward dwte vs reference", s, ranks), dwte_cat, plus(dwte0, dwte),
                 1e-6);
    expect_close(name("split backward dwpe vs reference", s, ranks), dwpe_split, plus(dwpe0, dwpe),
                 1e-6);
    if (is_cpu()) {  // the CUDA scatter-add uses atomics: its order varies from run to run
      expect_bitwise(name("split backward dwte vs encoder_backward", s, ranks), dwte_cat,
                     d_dwte_full->download());
      expect_bitwise(name("split backward dwpe vs encoder_backward", s, ranks), dwpe_split,
                     d_dwpe_full->download());
    }
  }
}

// ---- cross-entropy ----

struct XentShape {
  size_t N, V, Vp;
};
// V = 40 over 4 ranks of 16 leaves rank 3 nothing but padding.
const XentShape kXentShapes[] = {{7, 50, 64}, {7, 40, 64}, {6, 50257, 50304}};

std::string name(const char* what, const XentShape& s, size_t ranks) {
  return std::string(what) + " N" + std::to_string(s.N) + " V" + std::to_string(s.V) + " Vp" +
         std::to_string(s.Vp) + " ranks" + std::to_string(ranks);
}

size_t real_columns(Range r, size_t V) {
  return r.start >= V ? 0 : std::min(r.count, V - r.start);
}

struct XentInputs {
  std::vector<float> logits;     // (N, Vp)
  std::vector<int32_t> targets;  // (N)
};

// As test_softmax_xent.cpp: padding logits are huge (and must be ignored) and row 0 has a
// dominant logit. Row r holds the last real column of rank r (for the last real rank that is
// V-1), the last row column 0, so every rank with real columns owns some target.
XentInputs make_inputs(const XentShape& s, size_t ranks, uint32_t seed) {
  XentInputs in{random_normal(s.N * s.Vp, seed, 2.0f),
                random_tokens(s.N, seed + 1, static_cast<int32_t>(s.V))};
  for (size_t n = 0; n < s.N; ++n)
    for (size_t i = s.V; i < s.Vp; ++i) in.logits[n * s.Vp + i] = 1e4f;
  in.logits[s.V / 2] = 90.0f;
  for (size_t r = 0; r < ranks; ++r) {
    const Range range = split(s.Vp, ranks)[r];
    const size_t real = real_columns(range, s.V);
    if (real > 0) in.targets[r] = static_cast<int32_t>(range.start + real - 1);
  }
  in.targets[s.N - 1] = 0;
  return in;
}

// As test_softmax_xent.cpp: probabilities are checked relative to themselves.
constexpr double kGradFloor = 1e-30;

enum class GradMode { separate, in_place, none };
const char* mode_name(GradMode mode) {
  return mode == GradMode::separate ? "separate" : mode == GradMode::in_place ? "in-place" : "none";
}

TEST_P(VocabXentTest, SplitMatchesReferenceAndWholeVocabulary) {
  uint32_t seed = 2300;
  for (const XentShape& s : kXentShapes) {
    for (size_t ranks : {1, 2, 4}) {
      const XentInputs in = make_inputs(s, ranks, seed);
      seed += 2;
      const float dloss = 1.0f / static_cast<float>(s.N);
      const std::vector<Range> ranges = split(s.Vp, ranks);
      auto d_targets = to_device(in.targets);

      // The references: double, and the backend's own whole-vocabulary kernel.
      std::vector<double> losses(s.N), dlogits(s.N * s.Vp);
      ref::softmax_xent(losses.data(), dlogits.data(), widen(in.logits).data(), in.targets.data(),
                        static_cast<double>(dloss), s.N, s.V, s.Vp);
      auto d_full = to_device(in.logits);  // (N, Vp), becomes dlogits
      auto d_full_losses = empty<float>(s.N);
      kernels().softmax_xent_forward_backward(d_full->get(), d_full_losses->get(), d_full->get(),
                                              d_targets->get(), dloss, s.N, s.V, s.Vp);
      const std::vector<float> full_dlogits = d_full->download();
      const std::vector<float> full_losses = d_full_losses->download();

      for (GradMode mode : {GradMode::separate, GradMode::in_place, GradMode::none}) {
        const std::string label = std::string("vocab_xent ") + mode_name(mode);
        auto d_partials = empty<float>(ranks * s.N * 3);            // (ranks, N, 3)
        std::vector<std::unique_ptr<DeviceArray<float>>> d_logits;  // per rank (N, Vl)
        for (size_t r = 0; r < ranks; ++r) {
          d_logits.push_back(to_device(columns_of(in.logits, s.N, s.Vp, ranges[r])));
          kernels().vocab_xent_partials(d_partials->get() + r * s.N * 3, d_logits[r]->get(),
                                        d_targets->get(), s.N, ranges[r].count, ranges[r].start,
                                        s.V);
        }
        {
          // The partials combined on the host, as vocab_xent_finish combines them: whether a
          // wrong loss comes from the partials or from the finish.
          const std::vector<float> p = d_partials->download();  // (ranks, N, 3)
          std::vector<float> combined(s.N);
          for (size_t n = 0; n < s.N; ++n) {
            float m = -std::numeric_limits<float>::infinity();
            for (size_t r = 0; r < ranks; ++r) m = std::max(m, p[(r * s.N + n) * 3]);
            float sum = 0.0f, target = 0.0f;
            for (size_t r = 0; r < ranks; ++r) {
              const float* q = p.data() + (r * s.N + n) * 3;
              if (q[1] > 0.0f) sum += q[1] * std::exp(q[0] - m);
              target += q[2];
            }
            combined[n] = std::log(sum) - (target - m);
          }
          expect_close(name((label + " partials combined on the host").c_str(), s, ranks), combined,
                       losses, 1e-5, 0.0);
        }
        std::vector<float> grad(s.N * s.Vp);  // (N, Vp) the ranks' dlogits side by side
        for (size_t r = 0; r < ranks; ++r) {
          const Range range = ranges[r];
          // (N, Vl) NaN garbage: all of it must be overwritten.
          auto d_dlogits = to_device(
              std::vector<float>(s.N * range.count, std::numeric_limits<float>::quiet_NaN()));
          float* dlogits_ptr = mode == GradMode::separate   ? d_dlogits->get()
                               : mode == GradMode::in_place ? d_logits[r]->get()
                                                            : nullptr;
          auto d_losses = empty<float>(s.N);
          kernels().vocab_xent_finish(dlogits_ptr, d_losses->get(), d_logits[r]->get(),
                                      d_partials->get(), ranks, d_targets->get(), dloss, s.N,
                                      range.count, range.start, s.V);
          const std::vector<float> got_losses = d_losses->download();
          const std::string rank = " rank " + std::to_string(r);
          expect_close(name((label + " losses" + rank).c_str(), s, ranks), got_losses, losses, 1e-5,
                       0.0);
          if (ranks == 1) {
            expect_close(name((label + " losses vs softmax_xent").c_str(), s, ranks), got_losses,
                         widen(full_losses), 1e-5, 0.0);
          }
          if (mode == GradMode::separate)
            put_columns(grad, s.N, s.Vp, range, d_dlogits->download());
          if (mode == GradMode::in_place)
            put_columns(grad, s.N, s.Vp, range, d_logits[r]->download());
          if (mode == GradMode::none) {
            expect_bitwise(name((label + " logits kept" + rank).c_str(), s, ranks),
                           d_logits[r]->download(), columns_of(in.logits, s.N, s.Vp, range));
          }
        }
        if (mode == GradMode::none) continue;
        const double floor = kGradFloor * static_cast<double>(dloss);
        expect_close(name((label + " dlogits vs reference").c_str(), s, ranks), grad, dlogits, 1e-5,
                     floor);
        expect_close(name((label + " dlogits vs softmax_xent").c_str(), s, ranks), grad,
                     widen(full_dlogits), 1e-5, floor);
        size_t nonzero_padding = 0;
        for (size_t n = 0; n < s.N; ++n)
          for (size_t i = s.V; i < s.Vp; ++i) nonzero_padding += grad[n * s.Vp + i] != 0.0f;
        EXPECT_EQ(nonzero_padding, 0u) << name((label + " padding").c_str(), s, ranks);
      }
    }
  }
}

TEST_P(VocabXentTest, PartialsFollowTheirDefinition) {
  const XentShape s{7, 40, 64};
  const size_t ranks = 4;  // rank 3 holds padding only
  const XentInputs in = make_inputs(s, ranks, 2400);
  auto d_targets = to_device(in.targets);
  std::vector<double> ref_sums;
  std::vector<float> got_sums;
  for (const Range range : split(s.Vp, ranks)) {
    auto d_logits = to_device(columns_of(in.logits, s.N, s.Vp, range));  // (N, Vl)
    auto d_partials = empty<float>(s.N * 3);                             // (N, 3)
    kernels().vocab_xent_partials(d_partials->get(), d_logits->get(), d_targets->get(), s.N,
                                  range.count, range.start, s.V);
    const std::vector<float> p = d_partials->download();
    const size_t real = real_columns(range, s.V);
    for (size_t n = 0; n < s.N; ++n) {
      const float* x = in.logits.data() + n * s.Vp + range.start;  // this rank's columns
      float m = -std::numeric_limits<float>::infinity();
      for (size_t i = 0; i < real; ++i) m = std::max(m, x[i]);
      double sum = 0.0;
      for (size_t i = 0; i < real; ++i)
        sum += std::exp(static_cast<double>(x[i]) - static_cast<double>(m));
      const size_t column = static_cast<size_t>(in.targets[n]) - range.start;
      const float target_logit = column < range.count ? x[column] : 0.0f;
      EXPECT_EQ(p[n * 3], m) << "max of row " << n << " at column " << range.start;
      EXPECT_EQ(p[n * 3 + 2], target_logit) << "target logit of row " << n;
      ref_sums.push_back(sum);
      got_sums.push_back(p[n * 3 + 1]);
    }
  }
  // Sums of up to 16 exponentials; a padding-only rank's are exactly 0.
  expect_close("vocab_xent_partials sums N7 V40 Vp64 ranks4", got_sums, ref_sums, 1e-6, 0.0);
}

TEST_P(VocabXentTest, RejectsTargetOutsideVocabulary) {
  if (!is_cpu()) GTEST_SKIP() << "argument errors are thrown by the CPU backend only";
  auto d_logits = to_device(std::vector<float>(2 * 4, 0.0f));    // (N, Vl) = (2, 4)
  auto d_targets = to_device(std::vector<int32_t>{3, 6});        // 6 is padding, not vocabulary
  auto d_partials = to_device(std::vector<float>(2 * 3, 0.0f));  // (1, N, 3)
  auto d_losses = empty<float>(2);
  EXPECT_THROW(kernels().vocab_xent_partials(d_partials->get(), d_logits->get(), d_targets->get(),
                                             2, 4, 4, 5),
               tierzero::Error);
  EXPECT_THROW(
      kernels().vocab_xent_finish(nullptr, d_losses->get(), d_logits->get(), d_partials->get(), 1,
                                  d_targets->get(), 1.0f, 2, 4, 4, 5),
      tierzero::Error);
}

}  // namespace
}  // namespace tierzero::test
