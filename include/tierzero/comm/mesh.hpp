// The process mesh: world = dp x tp x pp x sp, laid out in a configurable order, with one
// communicator per group a rank belongs to. MeshLayout is the pure arithmetic (coordinates,
// peers), testable without MPI; ProcessMesh creates the groups over MPI. Sequence-parallel ranks
// hold identical weights, so ZeRO partitions over the combined dp x sp group (partition_group).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tierzero/comm/mpi_communicator.hpp"

namespace tierzero::comm {

enum class MeshDim : uint8_t { dp = 0, tp = 1, pp = 2, sp = 3 };
constexpr size_t kNumMeshDims = 4;
const char* mesh_dim_name(MeshDim d);  // "dp", "tp", "pp", "sp"

struct MeshShape {
  int dp = 1;
  int tp = 1;
  int pp = 1;
  int sp = 1;
  // The dimensions from fastest-varying (consecutive ranks) to slowest. The default keeps a
  // tensor-parallel group on consecutive ranks (one node, the most traffic) and pipeline stages
  // farthest apart (the least traffic), as Megatron-LM does.
  std::string order = "tp,sp,dp,pp";

  int extent(MeshDim d) const;
  int world_size() const { return dp * tp * pp * sp; }
  std::string str() const;  // "dp=2 tp=2 pp=2 sp=1 order=tp,sp,dp,pp"
};

using MeshCoord = std::array<int, kNumMeshDims>;  // indexed by MeshDim

class MeshLayout {
 public:
  // Throws Error when an extent is < 1 or the order is not a permutation of dp, tp, pp, sp.
  explicit MeshLayout(MeshShape shape);

  const MeshShape& shape() const { return shape_; }
  int world_size() const { return shape_.world_size(); }
  MeshCoord coords(int world_rank) const;
  int rank_of(const MeshCoord& coord) const;
  // World ranks of the group along `d` that `world_rank` is in, ordered by their coordinate on d
  // (so a rank's index in the list is its rank in the group).
  std::vector<int> group_ranks(MeshDim d, int world_rank) const;
  // World ranks sharing world_rank's tp and pp coordinates (the dp x sp partition group),
  // ordered by world rank.
  std::vector<int> partition_group_ranks(int world_rank) const;

 private:
  MeshShape shape_;
  std::array<int, kNumMeshDims> stride_{};  // world-rank stride of each dimension
};

class ProcessMesh {
 public:
  // Collective over `world`: every rank creates its dp, tp, pp, sp and dp x sp groups. Throws
  // Error when world.size() != shape.world_size().
  ProcessMesh(MpiCommunicator& world, MeshShape shape);
  ~ProcessMesh();

  const MeshLayout& layout() const { return layout_; }
  int rank() const { return rank_; }  // in the world communicator
  MeshCoord coords() const { return layout_.coords(rank_); }
  int coord(MeshDim d) const { return coords()[static_cast<size_t>(d)]; }
  MpiCommunicator& group(MeshDim d) { return *groups_[static_cast<size_t>(d)]; }
  MpiCommunicator& partition_group() { return *partition_; }
  const std::vector<int>& peers(MeshDim d) const {  // world ranks, by group rank
    return groups_[static_cast<size_t>(d)]->world_ranks();
  }
  std::string describe() const;  // "rank 5 of 8: dp 1/2, tp 1/2, pp 1/2, sp 0/1"

 private:
  MeshLayout layout_;
  int rank_ = 0;
  std::array<std::unique_ptr<MpiCommunicator>, kNumMeshDims> groups_;
  std::unique_ptr<MpiCommunicator> partition_;
};

}  // namespace tierzero::comm
