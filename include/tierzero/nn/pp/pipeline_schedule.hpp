// The pipeline-parallel schedule as pure logic: for one rank of a pipeline of `stages` ranks, the
// ordered list of forward and backward compute actions of one training step (GPipe, 1F1B i.e.
// PipeDream-flush, and Megatron's interleaved 1F1B), how many micro-batches' activations that
// order keeps alive at once, and its analytic bubble. It is kept apart from the executor so the
// order can be checked exhaustively (every action once, executable with blocking receives,
// bubble and memory as the papers say) without a model or a communicator.
//
// Communication is not in here: the executor derives it from the actions. With V = chunks *
// stages virtual stages and virtual stage k = chunk * stages + stage, a forward of k > 0 first
// receives its input from k - 1 and a forward of k < V - 1 then sends its output to k + 1; a
// backward of k < V - 1 first receives its output gradient from k + 1 and a backward of k > 0
// then sends its input gradient to k - 1. Sends are non-blocking, receives block.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace tierzero::nn {

enum class PipelineSchedule { gpipe, one_f_one_b, interleaved };

// "gpipe" | "1f1b" | "interleaved"; anything else throws Error listing those names.
PipelineSchedule pipeline_schedule_from_name(const std::string& name);
const char* pipeline_schedule_name(PipelineSchedule s);

struct PipelineAction {
  enum class Kind : uint8_t { forward, backward };
  Kind kind = Kind::forward;
  size_t micro_batch = 0;  // 0 .. micro_batches - 1
  size_t chunk = 0;        // this rank's model chunk, 0 .. chunks - 1

  bool operator==(const PipelineAction&) const = default;
};

struct PipelineShape {
  size_t stages = 1;         // ranks in the pipeline, p
  size_t stage = 0;          // this rank, 0 .. stages - 1
  size_t micro_batches = 1;  // m, per training step
  size_t chunks = 1;         // v: model chunks (virtual stages) per rank; > 1 only interleaved
  PipelineSchedule schedule = PipelineSchedule::one_f_one_b;

  // The virtual stage of this rank's `chunk`: chunks are dealt round-robin over the ranks, so
  // rank s holds layers-slices s, s + p, s + 2p, ... (Megatron's virtual pipeline layout).
  size_t virtual_stage(size_t chunk) const { return chunk * stages + stage; }
  size_t virtual_stages() const { return chunks * stages; }
};

// Throws tierzero::Error naming the value and a hint when: stages < 1, stage >= stages,
// micro_batches < 1, chunks < 1; chunks > 1 with gpipe or 1f1b; interleaved with micro_batches
// not a multiple of stages (Megatron's rule: its micro-batch groups are `stages` long, and a
// shorter last group stalls the pipeline), or with chunks < 2 when stages > 1 (that is 1f1b).
// Interleaved with stages 1 is allowed with any chunks: every virtual stage is on the one rank.
void validate(const PipelineShape& shape);

// The ordered compute actions of this rank for one training step: each (micro_batch, chunk)
// forward exactly once and backward exactly once, the backward after the forward.
//  - gpipe: all forwards in micro-batch order, then all backwards in micro-batch order.
//    Ascending (not reverse) backwards keep every schedule accumulating a parameter's gradient
//    over the micro-batches in the same order, so gpipe, 1f1b and interleaved give bitwise the
//    same gradients; the makespan is the same either way with uniform times.
//  - 1f1b (PipeDream-flush, Megatron's non-interleaved schedule): min(stages - stage - 1, m)
//    warm-up forwards, then one forward + one backward until the forwards run out, then the
//    remaining backwards; backwards in micro-batch order.
//  - interleaved (Megatron-LM's forward_backward_pipelining_with_interleaving): forward number
//    k of the m * v runs micro-batch group k / (p * v) (groups of p micro-batches), chunk
//    (k mod p*v) / p, micro-batch (k / (p*v)) * p + k mod p; backward number k runs the same
//    micro-batch on chunk v - 1 - that. Warm-up is (p - stage - 1) * 2 + (v - 1) * p forwards
//    capped at m * v, then pairs of forward k + warm-up and backward k, then the remaining
//    backwards.
std::vector<PipelineAction> pipeline_actions(const PipelineShape& shape);

// The most (micro_batch, chunk) pairs whose forward has run and whose backward has not, at any
// point of this rank's step (the activations it must hold at once): min(warm-up + 1, m * v),
// since warm-up forwards are followed by forward-then-backward pairs. That is gpipe m;
// 1f1b min(stages - stage, m); interleaved min((p - stage - 1) * 2 + (v - 1) * p + 1, m * v).
size_t max_in_flight(const PipelineShape& shape);

// The analytic bubble as a fraction of the step's TOTAL time (bubble / (bubble + ideal)), with
// uniform per-micro-batch times (Narayanan et al. 2021, "Efficient Large-Scale Language Model
// Training on GPU Clusters"): the bubble is (p - 1) micro-batch forward+backward times, divided
// by v when interleaved, so gpipe and 1f1b give (p - 1) / (m + p - 1) and interleaved gives
// (p - 1) / (v * m + p - 1). (The paper's (p - 1) / m and (p - 1) / (v * m) are bubble / ideal.)
double analytic_bubble_fraction(const PipelineShape& shape);

}  // namespace tierzero::nn
