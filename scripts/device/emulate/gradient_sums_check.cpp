// The CUDA backend's deterministic gradient sums run on the CPU under cuda_host_emulation.hpp:
// the bias column sums (elementwise.cu; of fp32 and of bf16 / fp16 gradients), LayerNorm's weight
// and bias gradients (layernorm.cu) and RMSNorm's gain gradient (llama.cu), each pass 1 then, with
// several slices, pass 2 (column_partials_sum_kernel); and the token embedding's gradient, whole
// vocabulary and one rank's range (elementwise.cu's sort-key and run kernels; CUB's stable radix
// sort is stood in for by std::stable_sort, which gives the same permutation). Each is launched as
// its launcher does (column_slices, the sort in chunks), on random nonzero inputs added into a
// random prior, at shapes off the tiles: N not a multiple of a slice, C not a multiple of 32, one
// slice, slices limited by the scratch, no scratch, repeated tokens, one token everywhere, tokens
// outside the range (negative ones too), the sort in several chunks. Prints the max error against a
// double reference, relative to each element's |prior| + sum of |terms| (what an fp32 sum's
// rounding is proportional to), and the elements whose bits differ when every kernel's blocks run
// in a shuffled order; the embedding's must also have the bits of the CPU backend's order (the
// prior, then each term in position order). Exits 1 past 1e-5 or on any differing bit. Built and
// run by emulate_gradient_sums.sh, which extracts the kernels into gradient_sums_body.inc.
#include <algorithm>
#include <climits>
#include <cstring>
#include <random>
#include <string>
#include "cuda_host_emulation.hpp"
#include "storage16.cuh"
// The kernels' 16-bit element types and their conversions, as the .cu files see them.
using namespace tierzero::kernels::cuda_impl;
#include "gradient_sums_body.inc"

namespace {

constexpr double kTolerance = 1e-5;
// Grid-stride kernels give the same result with any grid; a few blocks keep the emulation fast
// and still let a shuffled order interleave them.
constexpr unsigned kGridStrideBlocks = 3;
constexpr unsigned kBlockThreads = 256;  // cuda_common.cuh's kBlockSize
const float kNan = std::numeric_limits<float>::quiet_NaN();
const Dim3 kColumnBlock{kColumnTile, kRowLanes, 1};

// Max over elements of |got - ref| / magnitude (NaN counts as a huge error).
double max_error(const std::vector<float>& got, const std::vector<double>& ref,
                 const std::vector<double>& magnitude) {
  double worst = 0.0;
  for (size_t i = 0; i < got.size(); ++i) {
    double e = std::fabs(static_cast<double>(got[i]) - ref[i]) / std::max(magnitude[i], 1e-30);
    if (!(e == e)) e = 1e30;
    worst = std::max(worst, e);
  }
  return worst;
}

std::vector<float> random_nonzero(size_t n, std::mt19937& g, float mean = 0.0f) {
  std::normal_distribution<float> d(mean, 1.0f);
  std::vector<float> x(n);
  for (float& v : x) {
    do v = d(g);
    while (v == 0.0f);
  }
  return x;
}

// ---- column sums, launched as launch_bias_backward / launch_layernorm_backward /
// launch_rmsnorm_backward do ----

struct ColumnCase {
  size_t N, C, scratch_floats;
};

// Pass 2 over `outputs` consecutive (slices, C) partial blocks into outs[k].
void column_pass2(std::vector<float*> outs, const std::vector<float>& partials, size_t slices,
                  size_t C, uint32_t seed) {
  const Dim3 grid{static_cast<unsigned>(ceil_div(C, kColumnTile)), 1, 1};
  for (size_t k = 0; k < outs.size(); ++k) {
    emulate(
        grid, kColumnBlock, 0,
        [&] { column_partials_sum_kernel(outs[k], partials.data() + k * slices * C, slices, C); },
        seed);
  }
}

// In: float, or a 16-bit storage type (storage16.cuh), as launch_bias_backward's two forms.
template <typename In>
void bias_backward(std::vector<float>& dbias, const std::vector<In>& dout, const ColumnCase& s,
                   uint32_t seed) {
  const ColumnSlices split = column_slices(s.N, s.C, s.scratch_floats);
  std::vector<float> partials(split.slices > 1 ? split.slices * s.C : 0, kNan);  // (slices, C)
  float* p = split.slices > 1 ? partials.data() : nullptr;
  const Dim3 grid{static_cast<unsigned>(ceil_div(s.C, kColumnTile)),
                  static_cast<unsigned>(split.slices), 1};
  emulate(
      grid, kColumnBlock, 0,
      [&] { bias_backward_kernel(dbias.data(), p, dout.data(), s.N, s.C, split.rows_per_slice); },
      seed);
  if (p != nullptr) column_pass2({dbias.data()}, partials, split.slices, s.C, seed);
}

struct NormInputs {
  std::vector<float> dout, inp, mean, rstd;  // (N, C), (N, C), (N), (N)
};

void layernorm_params(std::vector<float>& dweight, std::vector<float>& dbias, const NormInputs& in,
                      const ColumnCase& s, uint32_t seed) {
  const ColumnSlices split = column_slices(s.N, 2 * s.C, s.scratch_floats);
  std::vector<float> partials(split.slices > 1 ? 2 * split.slices * s.C : 0, kNan);
  float* p = split.slices > 1 ? partials.data() : nullptr;  // (2, slices, C)
  const Dim3 grid{static_cast<unsigned>(ceil_div(s.C, kColumnTile)),
                  static_cast<unsigned>(split.slices), 1};
  emulate(
      grid, kColumnBlock, 0,
      [&] {
        layernorm_backward_params_kernel(dweight.data(), dbias.data(), p, in.dout.data(),
                                         in.inp.data(), in.mean.data(), in.rstd.data(), s.N, s.C,
                                         split.rows_per_slice);
      },
      seed);
  if (p != nullptr) column_pass2({dweight.data(), dbias.data()}, partials, split.slices, s.C, seed);
}

void rmsnorm_weight(std::vector<float>& dweight, const NormInputs& in, const ColumnCase& s,
                    uint32_t seed) {
  const ColumnSlices split = column_slices(s.N, s.C, s.scratch_floats);
  std::vector<float> partials(split.slices > 1 ? split.slices * s.C : 0, kNan);  // (slices, C)
  float* p = split.slices > 1 ? partials.data() : nullptr;
  const Dim3 grid{static_cast<unsigned>(ceil_div(s.C, kColumnTile)),
                  static_cast<unsigned>(split.slices), 1};
  emulate(
      grid, kColumnBlock, 0,
      [&] {
        rmsnorm_backward_weight_kernel(dweight.data(), p, in.dout.data(), in.inp.data(),
                                       in.rstd.data(), s.N, s.C, split.rows_per_slice);
      },
      seed);
  if (p != nullptr) column_pass2({dweight.data()}, partials, split.slices, s.C, seed);
}

// The 16-bit linears' bias gradient: the same kernel reading dout rounded to T, widened as read;
// against the double sum of the rounded values, and shuffled blocks for the same bits.
template <typename T>
int check_bias_16bit(const char* type, const std::vector<float>& dout,
                     const std::vector<float>& prior, const ColumnCase& s, uint32_t seed) {
  std::vector<T> dout16(dout.size());  // (N, C)
  std::vector<double> ref(prior.begin(), prior.end()), magnitude(s.C);
  for (size_t c = 0; c < s.C; ++c) magnitude[c] = std::fabs(prior[c]);
  for (size_t i = 0; i < dout.size(); ++i) {
    dout16[i] = from_f32<T>(dout[i]);
    const double v = to_f32(dout16[i]);
    ref[i % s.C] += v;
    magnitude[i % s.C] += std::fabs(v);
  }
  std::vector<float> in_order = prior, shuffled = prior;
  bias_backward(in_order, dout16, s, 0);
  bias_backward(shuffled, dout16, s, 11 + seed);
  const double e = max_error(in_order, ref, magnitude);
  const size_t differ = bit_differences(in_order, shuffled);
  std::printf(
      "columns N%zu C%zu %s dout: bias vs double %.1e; shuffled blocks: %zu of %zu differ\n", s.N,
      s.C, type, e, differ, s.C);
  return e > kTolerance || differ != 0 ? 1 : 0;
}

int check_columns() {
  const size_t big = size_t{1} << 20;  // cuda_kernels.cu's scratch, in floats
  const ColumnCase cases[] = {{1, 1, big},        {7, 5, big},      {256, 32, big},
                              {257, 33, big},     {1000, 100, big}, {3001, 70, big},
                              {2000, 40, 3 * 80}, {777, 37, 0},     {5000, 3, big}};
  int fail = 0;
  uint32_t seed = 100;
  for (const ColumnCase& s : cases) {
    std::mt19937 g(seed++);
    NormInputs in{random_nonzero(s.N * s.C, g), random_nonzero(s.N * s.C, g, 0.5f),
                  random_nonzero(s.N, g), random_nonzero(s.N, g, 1.0f)};
    const std::vector<float> prior_w = random_nonzero(s.C, g), prior_b = random_nonzero(s.C, g);
    // Double references: value and |prior| + sum |term| per column.
    std::vector<double> bias_ref(s.C), bias_mag(s.C), lnw_ref(s.C), lnw_mag(s.C), rms_ref(s.C),
        rms_mag(s.C);
    for (size_t c = 0; c < s.C; ++c) {
      bias_ref[c] = lnw_ref[c] = rms_ref[c] = prior_w[c];
      bias_mag[c] = lnw_mag[c] = rms_mag[c] = std::fabs(prior_w[c]);
      bias_ref[c] = prior_b[c];
      bias_mag[c] = std::fabs(prior_b[c]);
    }
    for (size_t r = 0; r < s.N; ++r)
      for (size_t c = 0; c < s.C; ++c) {
        const double dy = in.dout[r * s.C + c], x = in.inp[r * s.C + c];
        const double ln = dy * ((x - in.mean[r]) * in.rstd[r]);
        const double rms = dy * (x * in.rstd[r]);
        bias_ref[c] += dy;
        bias_mag[c] += std::fabs(dy);
        lnw_ref[c] += ln;
        lnw_mag[c] += std::fabs(ln);
        rms_ref[c] += rms;
        rms_mag[c] += std::fabs(rms);
      }
    // bias_backward doubles as LayerNorm's dbias: the same sum of dout.
    std::vector<float> runs[2][4];  // [order][bias, ln dweight, ln dbias, rms dweight]
    for (int order = 0; order < 2; ++order) {
      const uint32_t shuffle = order == 0 ? 0 : 7 + seed;
      auto& o = runs[order];
      o[0] = prior_b;
      bias_backward(o[0], in.dout, s, shuffle);
      o[1] = prior_w;
      o[2] = prior_b;
      layernorm_params(o[1], o[2], in, s, shuffle);
      o[3] = prior_w;
      rmsnorm_weight(o[3], in, s, shuffle);
    }
    const double e_bias = max_error(runs[0][0], bias_ref, bias_mag);
    const double e_lnw = max_error(runs[0][1], lnw_ref, lnw_mag);
    const double e_lnb = max_error(runs[0][2], bias_ref, bias_mag);
    const double e_rms = max_error(runs[0][3], rms_ref, rms_mag);
    size_t differ = 0;
    for (int k = 0; k < 4; ++k) differ += bit_differences(runs[0][k], runs[1][k]);
    const ColumnSlices split = column_slices(s.N, s.C, s.scratch_floats);
    const ColumnSlices split2 = column_slices(s.N, 2 * s.C, s.scratch_floats);
    std::printf(
        "columns N%zu C%zu (slices %zu x %zu rows, layernorm %zu x %zu): vs double: bias %.1e, "
        "ln dweight %.1e, ln dbias %.1e, rms dweight %.1e; shuffled blocks: %zu of %zu differ\n",
        s.N, s.C, split.slices, split.rows_per_slice, split2.slices, split2.rows_per_slice, e_bias,
        e_lnw, e_lnb, e_rms, differ, 4 * s.C);
    if (std::max({e_bias, e_lnw, e_lnb, e_rms}) > kTolerance || differ != 0) fail = 1;
    fail |= check_bias_16bit<Bf16Bits>("bf16", in.dout, prior_b, s, seed);
    fail |= check_bias_16bit<F16Bits>("fp16", in.dout, prior_b, s, seed);
  }
  return fail;
}

// ---- the token embedding's gradient, launched as launch_encoder_backward_wte does ----

struct EmbeddingCase {
  const char* what;
  size_t BT, C, vocab_start, vocab_count, rows, chunk;  // rows: of dwte_local
  int32_t token_lo, token_hi;                           // tokens drawn from [lo, hi]
  bool wild;                                            // some tokens INT_MIN, -1, INT_MAX
};

void embedding_backward(std::vector<float>& dwte, const std::vector<float>& dout,
                        const std::vector<int32_t>& tokens, const EmbeddingCase& s, uint32_t seed) {
  for (size_t begin = 0; begin < s.BT; begin += s.chunk) {
    const size_t count = std::min(s.chunk, s.BT - begin);
    std::vector<uint32_t> keys(count), positions(count);
    emulate(
        kGridStrideBlocks, kBlockThreads, 0,
        [&] {
          encoder_sort_keys_kernel(keys.data(), positions.data(), tokens.data() + begin,
                                   s.vocab_start, s.vocab_count, count);
        },
        seed);
    // CUB's radix sort is stable: the same permutation as a stable sort by key.
    std::vector<size_t> perm(count);
    std::iota(perm.begin(), perm.end(), size_t{0});
    std::stable_sort(perm.begin(), perm.end(),
                     [&](size_t a, size_t b) { return keys[a] < keys[b]; });
    std::vector<uint32_t> sorted_keys(count), sorted_positions(count);
    for (size_t i = 0; i < count; ++i) {
      sorted_keys[i] = keys[perm[i]];
      sorted_positions[i] = positions[perm[i]];
    }
    emulate(
        kGridStrideBlocks, kBlockThreads, 0,
        [&] {
          encoder_backward_runs_kernel(dwte.data(), dout.data() + begin * s.C, sorted_keys.data(),
                                       sorted_positions.data(), s.vocab_count, count, s.C);
        },
        seed);
  }
}

int check_embedding() {
  const size_t whole = size_t{1} << 31;  // launch_encoder_backward's vocab_count
  const size_t one_chunk = 131072;       // elementwise.cu's kEncoderSortChunk
  const EmbeddingCase cases[] = {
      {"whole", 1, 1, 0, whole, 5, one_chunk, 0, 4, false},
      {"whole", 7, 33, 0, whole, 3, one_chunk, 0, 2, false},
      {"whole", 300, 64, 0, whole, 50, one_chunk, 0, 49, false},
      {"whole", 1000, 100, 0, whole, 20, 256, 0, 19, false},  // 4 chunks, the last short
      {"whole", 500, 40, 0, whole, 7, 128, 3, 3, false},      // one token everywhere
      {"range", 600, 37, 20, 15, 15, one_chunk, -3, 60, true},
      {"range", 900, 70, 0, 10, 10, 200, 0, 40, true},  // 5 chunks
      {"range", 257, 32, 5, 1, 1, one_chunk, 0, 8, false},
  };
  int fail = 0;
  uint32_t seed = 200;
  for (const EmbeddingCase& s : cases) {
    std::mt19937 g(seed++);
    const std::vector<float> dout = random_nonzero(s.BT * s.C, g);
    const std::vector<float> prior = random_nonzero(s.rows * s.C, g);
    std::uniform_int_distribution<int32_t> pick(s.token_lo, s.token_hi);
    std::vector<int32_t> tokens(s.BT);
    for (size_t i = 0; i < s.BT; ++i) tokens[i] = pick(g);
    if (s.wild) {
      const int32_t wild[] = {INT_MIN, -1, INT_MAX};
      for (size_t i = 0; i < s.BT; i += 17) tokens[i] = wild[(i / 17) % 3];
    }
    // The double reference, and the CPU backend's fp32 order (the prior, then each term in
    // position order), whose bits the kernels must give.
    std::vector<double> ref(prior.begin(), prior.end()), mag(s.rows * s.C);
    std::vector<float> cpu_order = prior;
    for (size_t i = 0; i < mag.size(); ++i) mag[i] = std::fabs(prior[i]);
    size_t in_range = 0;
    for (size_t p = 0; p < s.BT; ++p) {
      const int64_t row = static_cast<int64_t>(tokens[p]) - static_cast<int64_t>(s.vocab_start);
      if (row < 0 || static_cast<size_t>(row) >= std::min(s.vocab_count, s.rows)) continue;
      ++in_range;
      for (size_t c = 0; c < s.C; ++c) {
        ref[row * s.C + c] += dout[p * s.C + c];
        mag[row * s.C + c] += std::fabs(dout[p * s.C + c]);
        cpu_order[row * s.C + c] += dout[p * s.C + c];
      }
    }
    std::vector<float> runs[2];
    for (int order = 0; order < 2; ++order) {
      runs[order] = prior;
      embedding_backward(runs[order], dout, tokens, s, order == 0 ? 0 : 11 + seed);
    }
    const double err = max_error(runs[0], ref, mag);
    const size_t differ = bit_differences(runs[0], runs[1]);
    const size_t differ_cpu = bit_differences(runs[0], cpu_order);
    std::printf(
        "embedding %s BT%zu C%zu rows %zu from %zu (%zu positions in range, chunks of %zu): vs "
        "double %.1e; vs the CPU's order %zu differ; shuffled blocks: %zu of %zu differ\n",
        s.what, s.BT, s.C, s.rows, s.vocab_start, in_range, std::min(s.chunk, s.BT), err,
        differ_cpu, differ, runs[0].size());
    if (err > kTolerance || differ != 0 || differ_cpu != 0) fail = 1;
  }
  return fail;
}

}  // namespace

int main() {
  std::printf("tolerance %.0e of |prior| + sum |terms| per element\n", kTolerance);
  int fail = check_columns();
  fail |= check_embedding();
  std::printf(fail ? "FAIL\n" : "PASS\n");
  return fail;
}
