// The partition store's test fixture, shared by the store's test files (one MPI program): a tiny
// GPT trained by the one-rank reference (nn::LocalParams + train::AdamWOptimizer) on the whole
// global batch and, on this rank's slice, through the store; placements by name; helpers that
// compare runs (bitwise on the CPU backend, within the reference tolerances on CUDA, where
// TIERZERO_TEST_DEVICE=cuda runs everything on device 0).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "mpi_test_main.hpp"
#include "tierzero/core/error.hpp"
#include "tierzero/core/memory_tracker.hpp"
#include "tierzero/core/random.hpp"
#include "tierzero/nn/gpt.hpp"
#include "tierzero/train/adamw_optimizer.hpp"
#include "tierzero/train/store_provider.hpp"
#include "tierzero/zero/partition_store.hpp"

namespace tierzero::zero_test {

using comm::test::ErrorStats;
using comm::test::session;

inline bool on_cuda() {
  const char* d = std::getenv("TIERZERO_TEST_DEVICE");
  return d != nullptr && std::string(d) == "cuda";
}

inline std::unique_ptr<Device> test_device() {
  return on_cuda() ? make_cuda_device(0) : make_cpu_device();
}

// Two runs that should agree: bitwise where `bitwise`, else within atol/rtol. Prints what it saw.
inline size_t count_disagreements(const std::vector<float>& got, const std::vector<float>& want,
                                  double atol, double rtol, const std::string& what, int rank,
                                  bool bitwise) {
  if (bitwise) {
    size_t differing = 0;
    for (size_t i = 0; i < got.size() && i < want.size(); ++i) differing += got[i] != want[i];
    std::printf("[rank %d] %s: %zu of %zu differ bitwise\n", rank, what.c_str(), differing,
                got.size());
    return differing + (got.size() != want.size() ? 1 : 0);
  }
  ErrorStats err;
  for (size_t i = 0; i < got.size() && i < want.size(); ++i)
    err.compare(got[i], want[i], atol, rtol);
  err.print(what, rank);
  return err.bad + (got.size() != want.size() ? 1 : 0);
}

// Bitwise on the CPU backend (same kernels, same order), within the reference tolerances on CUDA.
inline size_t count_disagreements(const std::vector<float>& got, const std::vector<float>& want,
                                  double atol, double rtol, const std::string& what, int rank) {
  return count_disagreements(got, want, atol, rtol, what, rank, !on_cuda());
}

inline nn::GPTConfig tiny_config() {
  nn::GPTConfig cfg;
  cfg.vocab_size = 61;
  cfg.padded_vocab_size = 64;
  cfg.max_seq_len = 16;
  cfg.num_layers = 2;
  cfg.num_heads = 4;
  cfg.channels = 32;
  return cfg;
}

constexpr size_t kLocalBatch = 2;  // sequences per rank
constexpr size_t kSeq = 16;
constexpr double kLr = 3e-3;
// Low enough that the early steps clip (the norm starts near 2), so clipping is exercised.
constexpr double kClip = 1.0;
constexpr size_t kPersistenceThreshold = 1000;  // the final layernorm (128 elements) persists

// Placements by name; "opt_grads_nvme" puts the gradient shards on NVMe beside the optimizer
// states; "host_nvme" keeps the parameters in host memory and the optimizer states on
// NVMe; "half" puts the first half of the units' parameters on NVMe and their
// optimizer states in host memory, the rest on the device.
inline zero::PlacementConfig placement_for(const std::string& name) {
  zero::PlacementConfig p;
  p.nvme_chunk_elems = 1000;  // several chunks per unit, none a multiple of the alignment
  if (name == "opt_host") p.optimizer.tier = Tier::host;
  if (name == "opt_nvme") p.optimizer.tier = Tier::nvme;
  if (name == "opt_grads_nvme") {  // optimizer states and gradient shards on NVMe
    p.optimizer.tier = Tier::nvme;
    p.nvme_grads = Tier::nvme;
  }
  if (name == "all_host") p.param.tier = p.optimizer.tier = Tier::host;
  if (name == "all_nvme") p.param.tier = p.optimizer.tier = Tier::nvme;
  if (name == "host_nvme") {  // parameters in host memory, optimizer states on NVMe
    p.param.tier = Tier::host;
    p.optimizer.tier = Tier::nvme;
  }
  if (name == "half") {
    p.param = {Tier::nvme, 0.5};
    p.optimizer = {Tier::host, 0.5};
  }
  return p;
}

struct Case {
  int stage;
  std::string placement;
};

inline std::string nvme_dir() {
  const char* t = std::getenv("TMPDIR");
  return t && *t ? t : std::filesystem::temp_directory_path().string();
}

// Everything one rank needs: the reference model on the global batch and the store-backed model
// on this rank's slice, starting from the same parameters.
struct Fixture {
  explicit Fixture(int stage, const std::string& placement = "device",
                   size_t max_live_elems = 1000000000, DType working = DType::f32,
                   size_t reduce_bucket_elems = 500000000, bool overlap_comm = true,
                   const std::function<void(zero::StoreConfig&)>& tweak = nullptr)
      : world(session().world()),
        ranks(world.size()),
        rank(world.rank()),
        cfg(tiny_config()),
        global_batch(kLocalBatch * static_cast<size_t>(ranks)),
        device(test_device()),
        ref_alloc(*device, 0),
        ref_model(cfg, ref_alloc),
        ref_params(ref_model.layout(), ref_alloc),
        ref_opt(optimizer, ref_model.layout(), ref_alloc),
        store_alloc(*device, 0, store_tracker),
        store(tierzero::train::units_from_layout(ref_model.layout()),
              tweaked(store_config(stage, placement, max_live_elems, working, reduce_bucket_elems,
                                   overlap_comm),
                      tweak),
              zero::AdamWConfig{optimizer.beta1, optimizer.beta2, optimizer.eps,
                                optimizer.weight_decay},
              world, store_alloc),
        provider(store, tierzero::train::group_units(ref_model.layout())),
        model(cfg, ref_alloc),
        x(global_batch * kSeq),
        y(global_batch * kSeq) {
    const nn::ParamLayout& layout = ref_model.layout();
    std::vector<float> init(layout.total_numel());  // (total_numel) host
    nn::init_gpt2_params(layout, cfg, 1234, init.data());
    device->copy(ref_params.params(), init.data(), init.size() * sizeof(float),
                 CopyKind::host_to_device, device->default_stream());
    for (size_t u = 0; u < layout.units().size(); ++u)
      store.load_unit(u, init.data() + layout.units()[u].offset);
    Rng rng(99);  // the same global batch on every rank
    for (size_t i = 0; i < x.size(); ++i) {
      x[i] = static_cast<int32_t>(rng.below(cfg.vocab_size));
      y[i] = static_cast<int32_t>(rng.below(cfg.vocab_size));
    }
  }

  // `c` with the caller's further settings applied.
  static zero::StoreConfig tweaked(zero::StoreConfig c,
                                   const std::function<void(zero::StoreConfig&)>& tweak) {
    if (tweak) tweak(c);
    return c;
  }

  static zero::StoreConfig store_config(int stage, const std::string& placement,
                                        size_t max_live_elems, DType working = DType::f32,
                                        size_t reduce_bucket_elems = 500000000,
                                        bool overlap_comm = true) {
    zero::StoreConfig c;
    c.stage = stage;
    c.param_persistence_threshold = kPersistenceThreshold;
    c.placement = placement_for(placement);
    c.placement.working = working;
    c.max_live_elems = max_live_elems;
    c.reduce_bucket_elems = reduce_bucket_elems;
    c.overlap_comm = overlap_comm;
    c.prefetch_bucket_elems = max_live_elems / 2;
    c.host_budget_bytes = size_t{64} << 20;
    c.nvme.directories = {nvme_dir()};
    c.nvme.block_size = 64 * 1024;
    return c;
  }

  comm::MpiCommunicator& world;
  int ranks, rank;
  nn::GPTConfig cfg;
  size_t global_batch;
  train::OptimizerConfig optimizer;
  std::unique_ptr<Device> device;
  DeviceAllocator ref_alloc;  // reference state and both models' activations (global tracker)
  nn::GPT ref_model;
  nn::LocalParams ref_params;
  train::AdamWOptimizer ref_opt;
  MemoryTracker store_tracker;  // only the store's bytes: its model state per rank
  DeviceAllocator store_alloc;
  zero::PartitionStore store;
  tierzero::train::StoreParamProvider provider;
  nn::GPT model;              // runs on this rank's slice through the store
  std::vector<int32_t> x, y;  // (global_batch, kSeq) inputs and targets
};

// One training step of the store on this rank's slice; returns the global loss.
inline float store_step(Fixture& f, zero::StoreStepStats* stats = nullptr) {
  const size_t local = kLocalBatch * kSeq;  // tokens per rank
  f.store.zero_grads();
  const size_t at = static_cast<size_t>(f.rank) * local;
  float loss = f.model.forward_backward(f.provider, f.x.data() + at, f.y.data() + at, kLocalBatch,
                                        kSeq, 1.0f);
  f.world.all_reduce(&loss, &loss, 1, DType::f32, comm::ReduceOp::avg);  // the global loss
  const zero::StoreStepStats s = f.store.step(kLr, kClip);
  if (stats) *stats = s;
  return loss;
}

inline std::vector<float> read_all_units(Fixture& f) {
  const nn::ParamLayout& layout = f.ref_model.layout();
  std::vector<float> all(layout.total_numel());  // (total_numel) host
  for (size_t u = 0; u < layout.units().size(); ++u)
    f.store.read_unit(u, all.data() + layout.units()[u].offset);
  return all;
}

}  // namespace tierzero::zero_test
