// The parameter gradients that gather many contributions per element, at training sizes, on every
// backend: the token embedding's rows (encoder_backward, encoder_backward_vocab_range), a matmul's
// bias (matmul_backward), LayerNorm's weight and bias, RMSNorm's gain. N = B*T rows in the
// thousands make the CUDA column sums run over several row slices and their second pass (shapes
// off the 32-column tiles and 256-row slices included), one case sorts the embedding's positions
// in two chunks, and the tokens are skewed so that a few rows gather thousands of positions.
// Each op runs twice from the same inputs and must give the same bits: on CUDA these sums once
// used atomics, whose order followed the GPU's block scheduling. The first run is checked against
// the double reference, tolerance 1e-5 of |ref| + rms(ref) for the column sums (fp32 sums of up
// to 65536 terms, in slices on CUDA) and 1e-4 for the embedding, whose rows add up to ~50000 terms
// one after another (the CPU's order; errors near 2e-5 seen). On CUDA the embedding's rows must
// moreover have the CPU backend's bits: both add each position's term onto the prior gradient in
// position order.
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernel_test_support.hpp"

namespace tierzero::test {
namespace {

class GradientSumsTest : public KernelTest {};
TZ_INSTANTIATE_BACKENDS(GradientSumsTest);

constexpr double kColumnTolerance = 1e-5;
constexpr double kEmbeddingTolerance = 1e-4;

// Elements of a and b whose bits differ.
size_t bit_differences(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  size_t n = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i)
    n += std::memcmp(&a[i], &b[i], sizeof(float)) != 0;
  return n;
}

void expect_same_bits(const std::string& label, const std::vector<float>& first,
                      const std::vector<float>& second) {
  const size_t differ = bit_differences(first, second);
  std::printf("%s repeat: %zu of %zu elements differ in bits\n", label.c_str(), differ,
              first.size());
  std::fflush(stdout);
  EXPECT_EQ(differ, 0u) << label << ": two runs from the same inputs differ";
}

// Tokens in [0, vocab) skewed towards 0 (token = vocab * u^4): token 0 takes vocab^(-1/4) of the
// positions, 18% at vocab 1000 and 38% at 50, more than a text's most frequent token, so that
// some rows gather long runs (up to ~50000 positions).
std::vector<int32_t> skewed_tokens(size_t n, uint32_t seed, int32_t vocab) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  std::vector<int32_t> tokens(n);
  for (int32_t& t : tokens) {
    const double x = u(rng);
    t = std::min(vocab - 1, static_cast<int32_t>(vocab * x * x * x * x));
  }
  return tokens;
}

struct EmbeddingCase {
  size_t B, T, C, Vp;
  size_t vocab_start, vocab_count;  // vocab_count 0: the whole-vocabulary encoder_backward
};

std::string name(const char* what, const EmbeddingCase& s) {
  std::string n = std::string(what) + " B" + std::to_string(s.B) + " T" + std::to_string(s.T) +
                  " C" + std::to_string(s.C) + " Vp" + std::to_string(s.Vp);
  if (s.vocab_count > 0)
    n += " range " + std::to_string(s.vocab_start) + "+" + std::to_string(s.vocab_count);
  return n;
}

TEST_P(GradientSumsTest, EmbeddingRepeatsBitForBit) {
  const EmbeddingCase cases[] = {
      {8, 1024, 768, 1000, 0, 0},   // GPT-2's width, 8192 positions
      {136, 1024, 24, 50, 0, 0},    // 139264 positions: two sorts on CUDA
      {8, 1024, 100, 1000, 0, 25},  // one rank's range holding the frequent tokens
      {4, 1000, 77, 1000, 300, 400},
  };
  uint32_t seed = 5100;
  for (const EmbeddingCase& s : cases) {
    const size_t BT = s.B * s.T;
    const bool range = s.vocab_count > 0;
    const size_t rows = range ? s.vocab_count : s.Vp;
    const std::vector<float> dout = random_normal(BT * s.C, seed++);  // (B, T, C)
    std::vector<int32_t> tokens = skewed_tokens(BT, seed++, static_cast<int32_t>(s.Vp));  // (B, T)
    if (range)  // negative ones fall outside
      for (size_t i = 0; i < BT; i += 97) tokens[i] = -1 - static_cast<int32_t>(i % 3);
    const std::vector<float> dwte0 = random_normal(rows * s.C, seed++);  // (rows, C) prior
    auto d_dout = to_device(dout);
    auto d_tokens = to_device(tokens);
    auto d_dwpe = empty<float>(s.T * s.C);  // (T, C) the whole encoder's; not checked here
    std::vector<float> runs[2];
    for (auto& run : runs) {
      auto d_dwte = to_device(dwte0);
      if (range) {
        kernels().encoder_backward_vocab_range(d_dwte->get(), nullptr, d_dout->get(),
                                               d_tokens->get(), s.vocab_start, s.vocab_count, s.B,
                                               s.T, s.C);
      } else {
        kernels().encoder_backward(d_dwte->get(), d_dwpe->get(), d_dout->get(), d_tokens->get(),
                                   s.B, s.T, s.C);
      }
      run = d_dwte->download();
    }
    expect_same_bits(name("embedding dwte", s), runs[0], runs[1]);

    std::vector<double> ref(dwte0.begin(), dwte0.end());
    for (size_t p = 0; p < BT; ++p) {
      const int64_t row = static_cast<int64_t>(tokens[p]) - static_cast<int64_t>(s.vocab_start);
      if (row < 0 || static_cast<size_t>(row) >= rows) continue;
      for (size_t c = 0; c < s.C; ++c) ref[row * s.C + c] += double{dout[p * s.C + c]};
    }
    expect_close(name("embedding dwte", s), runs[0], ref, kEmbeddingTolerance);

    if (!is_cpu()) {
      std::unique_ptr<Device> cpu = make_device("cpu");
      std::vector<float> cpu_dwte = dwte0, cpu_dwpe(s.T * s.C, 0.0f);
      if (range) {
        cpu->kernels().encoder_backward_vocab_range(cpu_dwte.data(), nullptr, dout.data(),
                                                    tokens.data(), s.vocab_start, s.vocab_count,
                                                    s.B, s.T, s.C);
      } else {
        cpu->kernels().encoder_backward(cpu_dwte.data(), cpu_dwpe.data(), dout.data(),
                                        tokens.data(), s.B, s.T, s.C);
      }
      const size_t differ = bit_differences(runs[0], cpu_dwte);
      std::printf("%s vs the CPU backend: %zu of %zu elements differ in bits\n",
                  name("embedding dwte", s).c_str(), differ, cpu_dwte.size());
      EXPECT_EQ(differ, 0u) << name("embedding dwte", s) << ": not the CPU backend's bits";
    }
  }
}

struct ColumnCase {
  size_t N, C;
};

std::string name(const char* what, const ColumnCase& s) {
  return std::string(what) + " N" + std::to_string(s.N) + " C" + std::to_string(s.C);
}

TEST_P(GradientSumsTest, ColumnSumsRepeatBitForBit) {
  // GPT-2's width over 8192 rows; widths and row counts off the tiles; many rows, few columns.
  const ColumnCase cases[] = {{8192, 768}, {8197, 777}, {65536, 64}, {300, 3072}};
  uint32_t seed = 5200;
  for (const ColumnCase& s : cases) {
    const size_t n = s.N * s.C;
    const std::vector<float> dout = random_normal(n, seed++);                  // (N, C)
    const std::vector<float> inp = random_normal(n, seed++, 2.0f, 0.5f);       // (N, C)
    const std::vector<float> weight = random_normal(s.C, seed++, 0.1f, 1.0f);  // (C)
    const std::vector<float> mean = random_normal(s.N, seed++, 0.5f);          // (N)
    const std::vector<float> rstd = random_uniform(s.N, seed++, 0.3f, 2.0f);   // (N)
    const std::vector<float> dw0 = random_normal(s.C, seed++);                 // (C) priors
    const std::vector<float> db0 = random_normal(s.C, seed++);                 // (C)
    const std::vector<float> dinp0 = random_normal(n, seed++);                 // (N, C)
    auto d_dout = to_device(dout);
    auto d_inp = to_device(inp);
    auto d_weight = to_device(weight);
    auto d_mean = to_device(mean);
    auto d_rstd = to_device(rstd);

    // [run]: matmul bias; layernorm dweight, dbias, dinp; rmsnorm dweight, dinp.
    std::vector<float> bias[2], ln_dw[2], ln_db[2], ln_dinp[2], rms_dw[2], rms_dinp[2];
    for (int run = 0; run < 2; ++run) {
      auto d_db = to_device(db0);
      kernels().matmul_backward(nullptr, nullptr, d_db->get(), d_dout->get(), nullptr, nullptr, s.N,
                                0, s.C, kernels::GradWrite::accumulate);
      bias[run] = d_db->download();

      auto d_dw = to_device(dw0);
      auto d_ln_db = to_device(db0);
      auto d_dinp = to_device(dinp0);
      kernels().layernorm_backward(d_dinp->get(), d_dw->get(), d_ln_db->get(), d_dout->get(),
                                   d_inp->get(), d_weight->get(), d_mean->get(), d_rstd->get(), s.N,
                                   s.C);
      ln_dw[run] = d_dw->download();
      ln_db[run] = d_ln_db->download();
      ln_dinp[run] = d_dinp->download();

      auto d_rms_dw = to_device(dw0);
      auto d_rms_dinp = to_device(dinp0);
      kernels().rmsnorm_backward(d_rms_dinp->get(), d_rms_dw->get(), d_dout->get(), d_inp->get(),
                                 d_weight->get(), d_rstd->get(), s.N, s.C);
      rms_dw[run] = d_rms_dw->download();
      rms_dinp[run] = d_rms_dinp->download();
    }
    expect_same_bits(name("matmul dbias", s), bias[0], bias[1]);
    expect_same_bits(name("layernorm dweight", s), ln_dw[0], ln_dw[1]);
    expect_same_bits(name("layernorm dbias", s), ln_db[0], ln_db[1]);
    expect_same_bits(name("layernorm dinp", s), ln_dinp[0], ln_dinp[1]);
    expect_same_bits(name("rmsnorm dweight", s), rms_dw[0], rms_dw[1]);
    expect_same_bits(name("rmsnorm dinp", s), rms_dinp[0], rms_dinp[1]);

    std::vector<double> ref_db(db0.begin(), db0.end()), ref_ln_dw(dw0.begin(), dw0.end()),
        ref_rms_dw(dw0.begin(), dw0.end());
    for (size_t r = 0; r < s.N; ++r)
      for (size_t c = 0; c < s.C; ++c) {
        const double dy = dout[r * s.C + c], x = inp[r * s.C + c], m = mean[r], rs = rstd[r];
        ref_db[c] += dy;
        ref_ln_dw[c] += dy * (x - m) * rs;
        ref_rms_dw[c] += dy * x * rs;
      }
    expect_close(name("matmul dbias", s), bias[0], ref_db, kColumnTolerance);
    expect_close(name("layernorm dweight", s), ln_dw[0], ref_ln_dw, kColumnTolerance);
    expect_close(name("layernorm dbias", s), ln_db[0], ref_db, kColumnTolerance);
    expect_close(name("rmsnorm dweight", s), rms_dw[0], ref_rms_dw, kColumnTolerance);
  }
}

}  // namespace
}  // namespace tierzero::test
