// What a run reports about itself outside the step: the opening line, the profile recorder
// primed with the run's shape, placements and the estimator's prediction, the --memory-json file
// and the memory summaries at the end. Private to src/train.
#pragma once

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "param_state.hpp"
#include "run_setup.hpp"
#include "step_schedule.hpp"
#include "tierzero/profile/profile_recorder.hpp"

namespace tierzero::train {

// "device tier", or where the offloaded states go: "optimizer on nvme (50% of units), ...".
std::string describe_placement(const TrainConfig& c);

// The run's opening line (rank 0's `out`; null: nothing).
void print_run_banner(std::FILE* out, const TrainConfig& c, const RunShape& shape,
                      const ModelChunks& chunks, const ParamState& params, int world_size,
                      size_t parameter_count, const std::string& device_name);

// A recorder primed with what the run is, where each unit's states live, and what the estimator
// predicts for every tier and category, so the report can set measured against predicted.
std::unique_ptr<profile::ProfileRecorder> make_recorder(
    const TrainConfig& c, bool timeline, const std::vector<nn::GPT*>& chunks,
    const nn::ParamLayout& layout, const zero::PartitionStore* store, const UnitGrouping* grouping,
    int rank, int ranks, size_t budget, const Device& device);

// This rank's tracked bytes per tier and category (see Trainer::run) and, under pipeline or
// Ulysses parallelism, what the rank's activations should be (the tests check the tracker's peak
// against it).
void write_memory_json(const std::string& path, const TrainConfig& c, const StepSchedule& schedule,
                       const ModelChunks& chunks, int rank, int ranks);

// The end-of-run memory summary: rank 0's on `out`, or with several ranks each rank's on
// `all_ranks_out`, prefixed, in rank order (collective: barriers over `group`).
void print_memory_summaries(std::FILE* all_ranks_out, std::FILE* out, int rank, int world_size,
                            comm::Communicator* group);

}  // namespace tierzero::train
