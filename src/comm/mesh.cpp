// MeshLayout (coordinates and peers from the shape and order) and ProcessMesh (one MPI group per
// mesh dimension, plus the dp x sp partition group), created by splitting the world.
#include "tierzero/comm/mesh.hpp"

#include <algorithm>
#include <sstream>

#include "tierzero/core/error.hpp"

namespace tierzero::comm {

namespace {
constexpr MeshDim kDims[kNumMeshDims] = {MeshDim::dp, MeshDim::tp, MeshDim::pp, MeshDim::sp};

MeshDim dim_from_name(const std::string& name, const std::string& order) {
  for (MeshDim d : kDims)
    if (name == mesh_dim_name(d)) return d;
  TZ_THROW("mesh order \"" + order + "\" names an unknown dimension \"" + name + "\"",
           "list each of dp, tp, pp, sp once, fastest-varying first, e.g. \"tp,sp,dp,pp\"");
}
}  // namespace

const char* mesh_dim_name(MeshDim d) {
  switch (d) {
    case MeshDim::dp:
      return "dp";
    case MeshDim::tp:
      return "tp";
    case MeshDim::pp:
      return "pp";
    case MeshDim::sp:
      return "sp";
  }
  return "?";
}

int MeshShape::extent(MeshDim d) const {
  switch (d) {
    case MeshDim::dp:
      return dp;
    case MeshDim::tp:
      return tp;
    case MeshDim::pp:
      return pp;
    case MeshDim::sp:
      return sp;
  }
  return 1;
}

std::string MeshShape::str() const {
  return "dp=" + std::to_string(dp) + " tp=" + std::to_string(tp) + " pp=" + std::to_string(pp) +
         " sp=" + std::to_string(sp) + " order=" + order;
}

MeshLayout::MeshLayout(MeshShape shape) : shape_(std::move(shape)) {
  for (MeshDim d : kDims)
    TZ_CHECK(shape_.extent(d) >= 1,
             std::string("mesh ") + shape_.str() + ": " + mesh_dim_name(d) + " must be >= 1",
             "every parallel degree is at least 1");
  std::vector<MeshDim> order;
  std::stringstream in(shape_.order);
  for (std::string name; std::getline(in, name, ',');) {
    name.erase(std::remove(name.begin(), name.end(), ' '), name.end());
    const MeshDim d = dim_from_name(name, shape_.order);
    TZ_CHECK(std::find(order.begin(), order.end(), d) == order.end(),
             "mesh order \"" + shape_.order + "\" names " + name + " twice",
             "list each of dp, tp, pp, sp once");
    order.push_back(d);
  }
  TZ_CHECK(order.size() == kNumMeshDims,
           "mesh order \"" + shape_.order + "\" does not name all of dp, tp, pp, sp",
           "list each of dp, tp, pp, sp once, fastest-varying first, e.g. \"tp,sp,dp,pp\"");
  int stride = 1;
  for (MeshDim d : order) {
    stride_[static_cast<size_t>(d)] = stride;
    stride *= shape_.extent(d);
  }
}

MeshCoord MeshLayout::coords(int world_rank) const {
  TZ_CHECK(world_rank >= 0 && world_rank < world_size(),
           "rank " + std::to_string(world_rank) + " is outside the mesh (" + shape_.str() + ")",
           "ranks run from 0 to dp*tp*pp*sp-1");
  MeshCoord c{};
  for (MeshDim d : kDims) {
    const auto i = static_cast<size_t>(d);
    c[i] = (world_rank / stride_[i]) % shape_.extent(d);
  }
  return c;
}

int MeshLayout::rank_of(const MeshCoord& coord) const {
  int rank = 0;
  for (MeshDim d : kDims) {
    const auto i = static_cast<size_t>(d);
    TZ_CHECK(coord[i] >= 0 && coord[i] < shape_.extent(d),
             std::string("mesh coordinate ") + mesh_dim_name(d) + "=" + std::to_string(coord[i]) +
                 " is outside the mesh (" + shape_.str() + ")",
             "coordinates run from 0 to the dimension's extent - 1");
    rank += coord[i] * stride_[i];
  }
  return rank;
}

std::vector<int> MeshLayout::group_ranks(MeshDim d, int world_rank) const {
  MeshCoord c = coords(world_rank);
  std::vector<int> ranks;
  for (int k = 0; k < shape_.extent(d); ++k) {
    c[static_cast<size_t>(d)] = k;
    ranks.push_back(rank_of(c));
  }
  return ranks;
}

std::vector<int> MeshLayout::partition_group_ranks(int world_rank) const {
  const MeshCoord mine = coords(world_rank);
  std::vector<int> ranks;
  for (int r = 0; r < world_size(); ++r) {
    const MeshCoord c = coords(r);
    if (c[static_cast<size_t>(MeshDim::tp)] == mine[static_cast<size_t>(MeshDim::tp)] &&
        c[static_cast<size_t>(MeshDim::pp)] == mine[static_cast<size_t>(MeshDim::pp)])
      ranks.push_back(r);
  }
  return ranks;
}

ProcessMesh::ProcessMesh(MpiCommunicator& world, MeshShape shape)
    : layout_(std::move(shape)), rank_(world.rank()) {
  TZ_CHECK(world.size() == layout_.world_size(),
           "mesh " + layout_.shape().str() + " needs " + std::to_string(layout_.world_size()) +
               " ranks, but " + world.describe() + " has " + std::to_string(world.size()),
           "launch with mpiexec -n " + std::to_string(layout_.world_size()) +
               ", or change the parallel degrees so their product is the rank count");
  for (MeshDim d : kDims) {
    // Ranks of one group share every other coordinate: the group's first member names it, and
    // the coordinate along d orders it.
    const std::vector<int> members = layout_.group_ranks(d, rank_);
    groups_[static_cast<size_t>(d)] = world.split(members.front(), coord(d), mesh_dim_name(d));
  }
  const std::vector<int> partition = layout_.partition_group_ranks(rank_);
  partition_ = world.split(partition.front(), rank_, "dp_sp");
}

ProcessMesh::~ProcessMesh() = default;

std::string ProcessMesh::describe() const {
  const MeshCoord c = coords();
  std::string s =
      "rank " + std::to_string(rank_) + " of " + std::to_string(layout_.world_size()) + ":";
  for (MeshDim d : kDims)
    s += std::string(d == MeshDim::dp ? " " : ", ") + mesh_dim_name(d) + " " +
         std::to_string(c[static_cast<size_t>(d)]) + "/" +
         std::to_string(layout_.shape().extent(d));
  return s;
}

}  // namespace tierzero::comm
