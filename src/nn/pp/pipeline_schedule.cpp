// The pipeline schedules' action orders (GPipe, 1F1B, Megatron's interleaved 1F1B), their
// activation high-water marks and analytic bubbles, and the shape checks that make them valid.
#include "tierzero/nn/pp/pipeline_schedule.hpp"

#include <algorithm>
#include <string>

#include "tierzero/core/error.hpp"

namespace tierzero::nn {

namespace {

constexpr const char* kValidNames = "gpipe, 1f1b, interleaved";

using Kind = PipelineAction::Kind;

// Forwards run before this rank's first backward. Every schedule is warm-up forwards, then
// forward-then-backward pairs while forwards remain, then the remaining backwards; only the
// warm-up length and the (micro_batch, chunk) of the k-th forward / backward differ.
size_t warmup_forwards(const PipelineShape& s) {
  const size_t total = s.micro_batches * s.chunks;
  size_t w = 0;
  switch (s.schedule) {
    case PipelineSchedule::gpipe:
      w = total;
      break;
    case PipelineSchedule::one_f_one_b:
      // Stage s's first backward needs micro-batch 0 to go through the p - s - 1 later stages.
      w = s.stages - s.stage - 1;
      break;
    case PipelineSchedule::interleaved:
      // Megatron: (v - 1) * p forwards on every rank fill the chunks before the last one, plus
      // two per later stage, as a forward and a backward both travel the remaining stages.
      w = (s.stages - s.stage - 1) * 2 + (s.chunks - 1) * s.stages;
      break;
  }
  return std::min(w, total);
}

// The (micro_batch, chunk) of this rank's k-th forward (forward) or k-th backward.
PipelineAction kth(const PipelineShape& s, Kind kind, size_t k) {
  if (s.schedule != PipelineSchedule::interleaved) return {kind, k, 0};
  // Megatron's schedule table with microbatch_group_size_per_vp_stage = p: groups of p
  // micro-batches, each run through chunk 0, then chunk 1, ... before the next group.
  const size_t p = s.stages, v = s.chunks;
  const size_t group = k / (p * v), in_group = k % (p * v);
  const size_t chunk = in_group / p;
  const size_t micro_batch = group * p + in_group % p;
  // Backwards walk the chunks the other way: the last chunk's gradient comes first.
  return {kind, micro_batch, kind == Kind::forward ? chunk : v - 1 - chunk};
}

}  // namespace

PipelineSchedule pipeline_schedule_from_name(const std::string& name) {
  if (name == "gpipe") return PipelineSchedule::gpipe;
  if (name == "1f1b") return PipelineSchedule::one_f_one_b;
  if (name == "interleaved") return PipelineSchedule::interleaved;
  TZ_THROW("unknown pipeline schedule '" + name + "'", std::string("choose one of ") + kValidNames);
}

const char* pipeline_schedule_name(PipelineSchedule s) {
  switch (s) {
    case PipelineSchedule::gpipe:
      return "gpipe";
    case PipelineSchedule::one_f_one_b:
      return "1f1b";
    case PipelineSchedule::interleaved:
      return "interleaved";
  }
  return "unknown";
}

void validate(const PipelineShape& s) {
  TZ_CHECK(s.stages >= 1, "pipeline stages 0", "a pipeline has at least 1 stage");
  TZ_CHECK(s.stage < s.stages,
           "pipeline stage " + std::to_string(s.stage) + " is not below the " +
               std::to_string(s.stages) + " stages",
           "stages are numbered 0 .. stages - 1");
  TZ_CHECK(s.micro_batches >= 1, "pipeline micro_batches 0",
           "a training step runs at least 1 micro-batch");
  TZ_CHECK(s.chunks >= 1, "pipeline chunks 0", "each rank holds at least 1 model chunk");
  const std::string name = pipeline_schedule_name(s.schedule);
  if (s.schedule != PipelineSchedule::interleaved)
    TZ_CHECK(s.chunks == 1,
             "pipeline chunks " + std::to_string(s.chunks) + " with the " + name + " schedule",
             "more than 1 model chunk per rank needs the interleaved schedule");
  if (s.schedule == PipelineSchedule::interleaved) {
    TZ_CHECK(s.micro_batches % s.stages == 0,
             "interleaved pipeline: micro_batches " + std::to_string(s.micro_batches) +
                 " is not a multiple of the " + std::to_string(s.stages) + " stages",
             "the interleaved schedule runs micro-batches in groups of `stages`; choose "
             "micro_batches a multiple of the pipeline stages");
    TZ_CHECK(s.stages == 1 || s.chunks >= 2,
             "interleaved pipeline with chunks " + std::to_string(s.chunks) + " over " +
                 std::to_string(s.stages) + " stages",
             "the interleaved schedule needs at least 2 model chunks per rank; with 1 use 1f1b");
  }
}

std::vector<PipelineAction> pipeline_actions(const PipelineShape& s) {
  validate(s);
  const size_t total = s.micro_batches * s.chunks;
  const size_t warmup = warmup_forwards(s);
  std::vector<PipelineAction> actions;
  actions.reserve(2 * total);
  for (size_t k = 0; k < warmup; ++k) actions.push_back(kth(s, Kind::forward, k));
  // Steady state: the forward first, so its output is on its way to the next stage while this
  // rank runs the backward (Megatron's order).
  for (size_t k = 0; k + warmup < total; ++k) {
    actions.push_back(kth(s, Kind::forward, k + warmup));
    actions.push_back(kth(s, Kind::backward, k));
  }
  for (size_t k = total - warmup; k < total; ++k) actions.push_back(kth(s, Kind::backward, k));
  return actions;
}

size_t max_in_flight(const PipelineShape& s) {
  validate(s);
  // Warm-up forwards pile up; each steady pair adds one before its backward frees one.
  return std::min(warmup_forwards(s) + 1, s.micro_batches * s.chunks);
}

double analytic_bubble_fraction(const PipelineShape& s) {
  validate(s);
  const double p = static_cast<double>(s.stages);
  const double m = static_cast<double>(s.micro_batches);
  const double v = static_cast<double>(s.chunks);  // 1 unless interleaved
  // Bubble (p - 1) / v micro-batch times against the ideal m, as a share of the total.
  return (p - 1) / (v * m + p - 1);
}

}  // namespace tierzero::nn
