// Trainer::State: what a run is made of once built (run_setup.hpp, param_state.hpp), shared by
// the trainer's files (trainer.cpp: build and loop; trainer_checkpoint.cpp: checkpoints and the
// model file). Members are destroyed in reverse order: the parameter state before the model and
// the groups it runs collectives over, the NCCL wrappings before the device, the MPI session last.
// Private to src/train.
#pragma once

#include <cstdint>
#include <memory>

#include "checkpoint_placement.hpp"
#include "param_state.hpp"
#include "run_setup.hpp"
#include "tierzero/train/trainer.hpp"

namespace tierzero::train {

struct Trainer::State {
  RunSession run;  // first, so destroyed last: the store's collectives need MPI alive
  RunShape shape;
  RunData data;
  std::unique_ptr<Device> device;
  std::unique_ptr<DeviceAllocator> allocator;
  ProcessGroups groups;
  ModelChunks chunks;
  std::unique_ptr<ParamState> params;
  // Where the block checkpoints live (null: in the micro-batches); after params, whose pinned
  // pool it may share.
  std::unique_ptr<CheckpointPlacement> checkpoints;
  int64_t lr_schedule_steps = 0;          // the schedule's length in use (saved in checkpoints)
  int64_t resumed_lr_schedule_steps = 0;  // the resumed checkpoint's (0: none or not recorded)
};

}  // namespace tierzero::train
