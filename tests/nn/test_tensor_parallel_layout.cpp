// ParamLayout as the modules declare it: for tp 1 exactly the layout the GPT always had (checked
// against the original formulas, written out here), units found by name; for tp 2 each rank's
// local shapes, partition flags and pieces, and a clear Error naming the tensor a tp size cannot
// split. A GPT itself refuses tp > 1 until the tensor-parallel collectives exist.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "tierzero/core/error.hpp"
#include "tierzero/device/device_allocator.hpp"
#include "tierzero/nn/gpt.hpp"
#include "tierzero/nn/pp/pipeline_cut.hpp"
#include "tierzero/nn/tp/tensor_parallel_params.hpp"
#include "tiny_gpt.hpp"

using namespace tierzero;
using nn::ParamKind;
using tierzero::testing::error_of;
using tierzero::testing::tiny_config;

namespace {

// The pre-module layout, formula by formula: unit-major, 64-element aligned tensors.
struct OldTensor {
  ParamKind kind;
  int layer;
  Shape shape;
  size_t offset, numel, unit;
  bool decay;
};
struct OldLayout {
  std::vector<OldTensor> tensors;
  std::vector<std::string> unit_names;
  std::vector<size_t> unit_offsets, unit_numels;
  size_t total = 0, count = 0;
};

OldLayout old_layout(const nn::GPTConfig& c) {
  const auto C = static_cast<int64_t>(c.channels);
  const auto Vp = static_cast<int64_t>(c.padded_vocab_size);
  const auto maxT = static_cast<int64_t>(c.max_seq_len);
  OldLayout o;
  auto begin_unit = [&](std::string name) {
    o.unit_names.push_back(std::move(name));
    o.unit_offsets.push_back(o.total);
  };
  auto add = [&](ParamKind kind, int layer, Shape shape, bool decay) {
    o.tensors.push_back(
        {kind, layer, shape, o.total, shape.numel(), o.unit_names.size() - 1, decay});
    o.total = (o.total + shape.numel() + 63) / 64 * 64;
    o.count += shape.numel();
  };
  auto end_unit = [&] { o.unit_numels.push_back(o.total - o.unit_offsets.back()); };
  begin_unit("embeddings");
  add(ParamKind::wte, -1, {Vp, C}, true);
  add(ParamKind::wpe, -1, {maxT, C}, true);
  end_unit();
  for (size_t l = 0; l < c.num_layers; ++l) {
    const int li = static_cast<int>(l);
    begin_unit("block." + std::to_string(l));
    add(ParamKind::ln1w, li, {C}, false);
    add(ParamKind::ln1b, li, {C}, false);
    add(ParamKind::qkvw, li, {3 * C, C}, true);
    add(ParamKind::qkvb, li, {3 * C}, false);
    add(ParamKind::attprojw, li, {C, C}, true);
    add(ParamKind::attprojb, li, {C}, false);
    add(ParamKind::ln2w, li, {C}, false);
    add(ParamKind::ln2b, li, {C}, false);
    add(ParamKind::fcw, li, {4 * C, C}, true);
    add(ParamKind::fcb, li, {4 * C}, false);
    add(ParamKind::fcprojw, li, {C, 4 * C}, true);
    add(ParamKind::fcprojb, li, {C}, false);
    end_unit();
  }
  begin_unit("final_norm");
  add(ParamKind::lnfw, -1, {C}, false);
  add(ParamKind::lnfb, -1, {C}, false);
  end_unit();
  return o;
}

}  // namespace

TEST(TensorParallelLayout, Tp1IsExactlyTheOriginalLayout) {
  const nn::GPTConfig configs[] = {
      nn::GPTConfig::preset("gpt2"), nn::GPTConfig::preset("gpt2-medium"),
      tiny_config(29, 32, 8, 2, 2, 16),
      tiny_config(61, 64, 13, 3, 3, 24),  // sizes that are not multiples of 64: padding
  };
  for (const nn::GPTConfig& c : configs) {
    const nn::ParamLayout layout = nn::gpt_param_layout(c);
    const OldLayout want = old_layout(c);
    SCOPED_TRACE(c.str());
    EXPECT_EQ(layout.tp().size, 1u);
    EXPECT_EQ(layout.total_numel(), want.total);
    EXPECT_EQ(layout.parameter_count(), want.count);
    ASSERT_EQ(layout.tensors().size(), want.tensors.size());
    for (size_t i = 0; i < want.tensors.size(); ++i) {
      const nn::ParamTensor& t = layout.tensors()[i];
      const OldTensor& w = want.tensors[i];
      EXPECT_EQ(t.kind, w.kind) << i;
      EXPECT_EQ(t.layer, w.layer) << i;
      EXPECT_EQ(t.shape, w.shape) << t.name();
      EXPECT_EQ(t.full_shape, w.shape) << t.name();
      EXPECT_EQ(t.offset, w.offset) << t.name();
      EXPECT_EQ(t.numel, w.numel) << t.name();
      EXPECT_EQ(t.unit, w.unit) << t.name();
      EXPECT_EQ(t.decay, w.decay) << t.name();
      EXPECT_EQ(&layout.get(t.kind, t.layer), &t) << t.name();
    }
    ASSERT_EQ(layout.units().size(), want.unit_names.size());
    for (size_t u = 0; u < want.unit_names.size(); ++u) {
      const nn::ParamUnit& unit = layout.units()[u];
      EXPECT_EQ(unit.name, want.unit_names[u]);
      EXPECT_EQ(unit.offset, want.unit_offsets[u]) << unit.name;
      EXPECT_EQ(unit.numel, want.unit_numels[u]) << unit.name;
      for (size_t ti : unit.tensors) EXPECT_EQ(want.tensors[ti].unit, u) << unit.name;
      EXPECT_EQ(layout.unit_index(unit.name), u);
    }
    // Names as the checkpoint code and the reports know them.
    EXPECT_EQ(layout.get(ParamKind::wte).name(), "wte");
    EXPECT_EQ(layout.get(ParamKind::fcprojb, 1).name(), "block.1.fcprojb");
  }
}

TEST(TensorParallelLayout, UnitsAreFoundByName) {
  const nn::ParamLayout layout = nn::gpt_param_layout(tiny_config(29, 32, 8, 3, 2, 16));
  EXPECT_EQ(layout.unit_index("embeddings"), 0u);
  EXPECT_EQ(layout.unit_index("block.2"), 3u);
  EXPECT_EQ(layout.unit_index("final_norm"), 4u);
  const std::string e = error_of([&] { layout.unit_index("block.3"); });
  EXPECT_NE(e.find("no parameter unit 'block.3'"), std::string::npos) << e;
  EXPECT_NE(e.find("embeddings, block.0, block.1, block.2, final_norm"), std::string::npos) << e;
}

TEST(TensorParallelLayout, Tp2LocalShapesAndFlags) {
  const nn::GPTConfig c = nn::GPTConfig::preset("gpt2");  // C 768, NH 12, Vp 50304, maxT 1024
  const nn::ParamLayout one = nn::gpt_param_layout(c);
  for (size_t rank : {0, 1}) {
    const nn::ParamLayout layout = nn::gpt_param_layout(c, nn::TensorParallel{2, rank});
    SCOPED_TRACE("tp rank " + std::to_string(rank));
    EXPECT_EQ(layout.tp().size, 2u);
    EXPECT_EQ(layout.tp().rank, rank);
    struct Want {
      ParamKind kind;
      int layer;
      Shape local;
      int dim;
      size_t stride;
    };
    const Want wants[] = {
        {ParamKind::wte, -1, {25152, 768}, 0, 1},    // vocab-parallel
        {ParamKind::wpe, -1, {1024, 768}, -1, 1},    // replicated
        {ParamKind::ln1w, 3, {768}, -1, 1},          // layernorms replicated
        {ParamKind::ln1b, 3, {768}, -1, 1},          //
        {ParamKind::qkvw, 3, {1152, 768}, 0, 3},     // column-parallel, q, k, v cut apart
        {ParamKind::qkvb, 3, {1152}, 0, 3},          //
        {ParamKind::attprojw, 3, {768, 384}, 1, 1},  // row-parallel
        {ParamKind::attprojb, 3, {768}, -1, 1},      // added after the sum: replicated
        {ParamKind::ln2w, 3, {768}, -1, 1},          //
        {ParamKind::fcw, 3, {1536, 768}, 0, 1},      // column-parallel
        {ParamKind::fcb, 3, {1536}, 0, 1},           //
        {ParamKind::fcprojw, 3, {768, 1536}, 1, 1},  // row-parallel
        {ParamKind::fcprojb, 3, {768}, -1, 1},       //
        {ParamKind::lnfw, -1, {768}, -1, 1},         //
        {ParamKind::lnfb, -1, {768}, -1, 1},         //
    };
    for (const Want& w : wants) {
      const nn::ParamTensor& t = layout.get(w.kind, w.layer);
      EXPECT_EQ(t.shape, w.local) << t.name() << " " << t.shape.str();
      EXPECT_EQ(t.numel, w.local.numel()) << t.name();
      EXPECT_EQ(t.full_shape, one.get(w.kind, w.layer).shape) << t.name();
      EXPECT_EQ(t.partition_dim, w.dim) << t.name();
      EXPECT_EQ(t.partition_stride, w.stride) << t.name();
      EXPECT_EQ(t.replicated(), w.dim < 0) << t.name();
      EXPECT_EQ(t.decay, one.get(w.kind, w.layer).decay) << t.name();
    }
    // Same units, same order, contiguous, each tensor 64-element aligned inside its unit.
    ASSERT_EQ(layout.units().size(), one.units().size());
    size_t covered = 0, replicated = 0;
    for (size_t u = 0; u < layout.units().size(); ++u) {
      const nn::ParamUnit& unit = layout.units()[u];
      EXPECT_EQ(unit.name, one.units()[u].name);
      EXPECT_EQ(unit.offset, covered);
      covered += unit.numel;
      for (size_t ti : unit.tensors) {
        const nn::ParamTensor& t = layout.tensors()[ti];
        EXPECT_EQ(t.offset % 64, 0u) << t.name();
        EXPECT_LE(t.offset + t.numel, unit.offset + unit.numel) << t.name();
        if (t.replicated()) replicated += t.numel;
      }
    }
    EXPECT_EQ(covered, layout.total_numel());
    // Partitioned tensors halve, replicated ones stay whole.
    EXPECT_EQ(2 * (layout.parameter_count() - replicated) + replicated, one.parameter_count());
  }
}

TEST(TensorParallelLayout, LocalRangesCutEachFusedPartSeparately) {
  const nn::GPTConfig c = tiny_config(61, 64, 16, 1, 4, 32);  // head size 8
  const nn::ParamLayout layout = nn::gpt_param_layout(c, nn::TensorParallel{2, 1});
  const nn::ParamTensor& qkvw = layout.get(ParamKind::qkvw, 0);
  // Rank 1 holds the second half of q, of k and of v.
  const std::vector<nn::IndexRange> want = {{16, 16}, {48, 16}, {80, 16}};
  EXPECT_EQ(qkvw.local_ranges(layout.tp()), want);
  const nn::ParamTensor& attprojw = layout.get(ParamKind::attprojw, 0);
  EXPECT_EQ(attprojw.local_ranges(layout.tp()), (std::vector<nn::IndexRange>{{16, 16}}));
  EXPECT_EQ(layout.get(ParamKind::wte).local_ranges(layout.tp()),
            (std::vector<nn::IndexRange>{{32, 32}}));
  EXPECT_EQ(layout.get(ParamKind::wpe).local_ranges(layout.tp()),
            (std::vector<nn::IndexRange>{{0, 16}}));
}

TEST(TensorParallelLayout, InitialisationGivesEachRankItsPieceOfTheOneRankModel) {
  const nn::GPTConfig c = tiny_config(61, 64, 16, 2, 4, 32);
  const nn::ParamLayout one = nn::gpt_param_layout(c);
  std::vector<float> full(one.total_numel());
  nn::init_gpt2_params(one, c, 7, full.data());
  for (size_t rank : {0, 1}) {
    const nn::ParamLayout layout = nn::gpt_param_layout(c, nn::TensorParallel{2, rank});
    std::vector<float> local(layout.total_numel());
    nn::init_gpt2_params(layout, c, 7, local.data());
    for (const nn::ParamTensor& t : layout.tensors()) {
      const nn::ParamTensor& f = one.get(t.kind, t.layer);
      const size_t rows = static_cast<size_t>(t.shape[0]);
      const size_t cols = t.shape.rank() > 1 ? static_cast<size_t>(t.shape[1]) : 1;
      const size_t full_cols = t.full_shape.rank() > 1 ? static_cast<size_t>(t.full_shape[1]) : 1;
      const std::vector<nn::IndexRange> ranges = t.local_ranges(layout.tp());
      for (size_t r = 0; r < rows; ++r)
        for (size_t k = 0; k < cols; ++k) {
          // The element's (row, column) in the full tensor, from the ranges along the split dim.
          size_t fr = r, fk = k;
          size_t& along = t.partition_dim == 1 ? fk : fr;
          const size_t local_index = t.partition_dim == 1 ? k : r;
          if (!t.replicated()) {
            size_t at = local_index;
            for (const nn::IndexRange& range : ranges) {
              if (at < range.length) {
                along = range.start + at;
                break;
              }
              at -= range.length;
            }
          }
          ASSERT_EQ(local[t.offset + r * cols + k], full[f.offset + fr * full_cols + fk])
              << t.name() << " rank " << rank << " local (" << r << ", " << k << ")";
        }
    }
  }
}

TEST(TensorParallelLayout, ASizeThatDoesNotSplitNamesTheTensor) {
  // Vp 63 is odd: the vocabulary-parallel wte cannot split over 2.
  std::string e = error_of([] { nn::gpt_param_layout(tiny_config(61, 63, 16, 1, 4, 32), {2, 0}); });
  std::printf("%s\n", e.c_str());
  EXPECT_NE(e.find("tensor wte (63, 32)"), std::string::npos) << e;
  EXPECT_NE(e.find("tp=2"), std::string::npos) << e;
  // 3 heads of 16 cannot split over 2 without cutting a head, although 48 channels can.
  e = error_of([] { nn::gpt_param_layout(tiny_config(61, 64, 16, 1, 3, 48), {2, 1}); });
  std::printf("%s\n", e.c_str());
  EXPECT_NE(e.find("tensor block.0.qkvw (144, 48)"), std::string::npos) << e;
  EXPECT_NE(e.find("3 fused parts of 48"), std::string::npos) << e;
  EXPECT_NE(e.find("whole groups of 16"), std::string::npos) << e;
  // fc's 4C = 40 splits over 4 into 10s, but C = 10 itself (qkv) does not (heads of 5).
  e = error_of([] { nn::gpt_param_layout(tiny_config(61, 64, 16, 1, 2, 10), {4, 0}); });
  EXPECT_NE(e.find("block.0.qkvw"), std::string::npos) << e;
  EXPECT_THROW(nn::gpt_param_layout(tiny_config(61, 64, 16, 1, 2, 32), nn::TensorParallel{2, 2}),
               Error);
  EXPECT_THROW(nn::gpt_param_layout(tiny_config(61, 64, 16, 1, 2, 32), nn::TensorParallel{0, 0}),
               Error);
}

TEST(TensorParallelLayout, ActivationDimsCutHeadsFeaturesVocabularyAndWithSpTheStream) {
  const nn::GPTConfig c = tiny_config(61, 64, 16, 1, 4, 32);  // C 32, 4 heads, Vp 64
  const nn::ActivationDims one = nn::ActivationDims::of(c, 2, 8);
  EXPECT_EQ(one.stream_tokens, 16u);
  EXPECT_EQ(one.local_channels, 32u);
  EXPECT_EQ(one.local_vocab, 64u);
  const nn::ActivationDims tp2 = nn::ActivationDims::of(c, 2, 8, 2);
  EXPECT_EQ(tp2.tokens, 16u);
  EXPECT_EQ(tp2.stream_tokens, 16u);  // no sequence parallelism: the stream stays whole
  EXPECT_EQ(tp2.local_heads, 2u);
  EXPECT_EQ(tp2.local_channels, 16u);
  EXPECT_EQ(tp2.local_hidden, 64u);
  EXPECT_EQ(tp2.local_vocab, 32u);
  const nn::ActivationDims sp2 = nn::ActivationDims::of(c, 2, 8, 2, true);
  EXPECT_TRUE(sp2.sequence_parallel);
  EXPECT_EQ(sp2.stream_tokens, 8u);
  EXPECT_FALSE(nn::ActivationDims::of(c, 2, 8, 1, true).sequence_parallel);  // no tp: no split
  std::string e = error_of([&] { (void)nn::ActivationDims::of(c, 1, 3, 2, true); });
  std::printf("%s\n", e.c_str());
  EXPECT_NE(e.find("3 tokens"), std::string::npos) << e;
  e = error_of([&] { (void)nn::ActivationDims::of(c, 1, 4, 8); });  // 4 heads over 8
  std::printf("%s\n", e.c_str());
  EXPECT_NE(e.find("n_head 4 is not divisible by tensor_parallel 8"), std::string::npos) << e;
  // The activation byte counts shrink with tp, and the stream's with sp.
  const size_t b1 = nn::GPT::activation_bytes_for(c, 2, 8, false);
  const size_t b2 = nn::GPT::activation_bytes_for(c, 2, 8, false, 2);
  const size_t b2sp = nn::GPT::micro_batch_bytes_for(c, 2, 8, false, 2, true);
  std::printf("activation bytes: tp1 %zu, tp2 %zu, tp2 micro-batch with sp %zu\n", b1, b2, b2sp);
  EXPECT_LT(b2, b1);
  EXPECT_LT(b2sp, nn::GPT::micro_batch_bytes_for(c, 2, 8, false, 2));
}

TEST(TensorParallelLayout, WholeParamsScatterToRanksAndAssembleBack) {
  const nn::GPTConfig c = tiny_config(61, 64, 16, 2, 4, 32);
  const nn::ParamLayout full_layout = nn::gpt_param_layout(c);
  std::vector<float> full(full_layout.total_numel(), 0.0f);
  nn::init_gpt2_params(full_layout, c, 5, full.data());
  for (size_t tp : {2u, 4u}) {
    const nn::ParamLayout rank0 = nn::gpt_param_layout(c, nn::TensorParallel{tp, 0});
    std::vector<float> all(tp * rank0.total_numel(), 0.0f);  // (tp, total)
    for (size_t r = 0; r < tp; ++r) {
      const nn::ParamLayout local = nn::gpt_param_layout(c, nn::TensorParallel{tp, r});
      nn::scatter_full_params(full_layout, full.data(), local,
                              all.data() + r * rank0.total_numel());
      // init on the rank directly gives the same pieces
      std::vector<float> direct(local.total_numel(), 0.0f);
      nn::init_gpt2_params(local, c, 5, direct.data());
      for (const nn::ParamTensor& t : local.tensors())
        for (size_t i = 0; i < t.numel; ++i)
          ASSERT_EQ(direct[t.offset + i], all[r * rank0.total_numel() + t.offset + i]) << t.name();
    }
    std::vector<float> back(full_layout.total_numel(), 0.0f);
    nn::assemble_full_params(rank0, all.data(), full_layout, back.data());
    for (const nn::ParamTensor& t : full_layout.tensors())
      for (size_t i = 0; i < t.numel; ++i)
        ASSERT_EQ(back[t.offset + i], full[t.offset + i]) << t.name() << " tp " << tp;
  }
}

// for_each_whole_run over any range of a rank's buffer (a tp piece of a pipeline stage) gives the
// same values as scatter_full_params: what range loads and streamed saves of model files rely on.
TEST(TensorParallelLayout, WholeRunsOfAnyRangeMatchTheScatter) {
  const nn::GPTConfig c = tiny_config(61, 64, 16, 4, 4, 32);
  const nn::ParamLayout full_layout = nn::gpt_param_layout(c);
  std::vector<float> full(full_layout.total_numel(), 0.0f);  // (whole model) fp32
  nn::init_gpt2_params(full_layout, c, 9, full.data());
  std::mt19937_64 rng(3);
  size_t ranges = 0, mismatches = 0;
  for (size_t pp : {1u, 2u})
    for (size_t tp : {1u, 2u, 4u}) {
      const std::vector<nn::PipelineStage> stages = nn::partition_pipeline(c, pp);
      for (size_t st = 0; st < pp; ++st)
        for (size_t r = 0; r < tp; ++r) {
          const nn::ParamLayout local = nn::chunks_param_layout(c, nn::rank_chunks(stages, pp, st),
                                                                nn::TensorParallel{tp, r});
          const size_t n = local.total_numel();
          std::vector<float> want(n, 0.0f);  // (n) the scatter's pieces
          nn::scatter_full_params(full_layout, full.data(), local, want.data());
          for (size_t k = 0; k < 200; ++k) {
            const size_t begin = k == 0 ? 0 : rng() % n;
            const size_t count = k == 0 ? n : 1 + rng() % std::min<size_t>(n - begin, 3000);
            std::vector<float> got(count, 0.0f);  // (count) the runs' values
            nn::for_each_whole_run(local, full_layout, begin, count,
                                   [&](const nn::ParamTensor&, size_t f, size_t at, size_t m) {
                                     ASSERT_LE(at + m, count);
                                     std::copy_n(full.begin() + static_cast<std::ptrdiff_t>(f), m,
                                                 got.begin() + static_cast<std::ptrdiff_t>(at));
                                   });
            ++ranges;
            if (!std::equal(got.begin(), got.end(),
                            want.begin() + static_cast<std::ptrdiff_t>(begin)))
              ++mismatches;
          }
        }
    }
  std::printf("whole runs: %zu ranges checked, %zu differ from the scatter\n", ranges, mismatches);
  EXPECT_EQ(mismatches, 0u);
}
