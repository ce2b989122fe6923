// The process mesh on 8 ranks: for several (dp, tp, pp, sp) layouts and orders, each rank's
// coordinates and groups match MeshLayout's arithmetic, every group's collectives reach exactly
// its peers (an all-reduce and an all-gather of world ranks, checked against the peers list).
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <vector>

#include "mpi_test_main.hpp"
#include "tierzero/comm/mesh.hpp"
#include "tierzero/core/error.hpp"

namespace tierzero::comm::test {
namespace {

void check_group(MpiCommunicator& group, const std::vector<int>& expected_peers, int my_coord,
                 const char* name) {
  EXPECT_EQ(group.world_ranks(), expected_peers) << name;
  EXPECT_EQ(group.rank(), my_coord) << name;
  // Each member contributes its world rank; the sum and the gathered list must be the peers'.
  float mine = static_cast<float>(session().world().rank());
  float sum = 0.0f;
  group.all_reduce(&mine, &sum, 1, DType::f32, ReduceOp::sum);
  const int want = std::accumulate(expected_peers.begin(), expected_peers.end(), 0);
  EXPECT_EQ(sum, static_cast<float>(want)) << name;
  std::vector<float> gathered(expected_peers.size());  // (group size)
  group.all_gather(&mine, gathered.data(), 1, DType::f32);
  for (size_t i = 0; i < expected_peers.size(); ++i)
    EXPECT_EQ(gathered[i], static_cast<float>(expected_peers[i])) << name << " member " << i;
}

void check_mesh(const MeshShape& shape) {
  MpiCommunicator& world = session().world();
  ASSERT_EQ(world.size(), shape.world_size()) << "launch this test with 8 ranks";
  ProcessMesh mesh(world, shape);
  const MeshLayout& layout = mesh.layout();
  std::printf("[%s] %s\n", shape.str().c_str(), mesh.describe().c_str());
  EXPECT_EQ(layout.rank_of(mesh.coords()), world.rank());
  for (MeshDim d : {MeshDim::dp, MeshDim::tp, MeshDim::pp, MeshDim::sp}) {
    EXPECT_EQ(mesh.group(d).size(), shape.extent(d)) << mesh_dim_name(d);
    EXPECT_EQ(mesh.peers(d), layout.group_ranks(d, world.rank())) << mesh_dim_name(d);
    check_group(mesh.group(d), layout.group_ranks(d, world.rank()), mesh.coord(d),
                mesh_dim_name(d));
  }
  const std::vector<int> partition = layout.partition_group_ranks(world.rank());
  EXPECT_EQ(mesh.partition_group().size(), shape.dp * shape.sp);
  const auto it = std::find(partition.begin(), partition.end(), world.rank());
  check_group(mesh.partition_group(), partition, static_cast<int>(it - partition.begin()), "dp_sp");
}

TEST(CommMesh, Dp2Tp2Pp2) {
  check_mesh(MeshShape{2, 2, 2, 1, "tp,sp,dp,pp"});
}

TEST(CommMesh, Dp2Sp4) {
  check_mesh(MeshShape{2, 1, 1, 4, "tp,sp,dp,pp"});
}

TEST(CommMesh, Dp2Tp2Pp2DataParallelInnermost) {
  check_mesh(MeshShape{2, 2, 2, 1, "dp,pp,tp,sp"});
}

TEST(CommMesh, Dp8) {
  check_mesh(MeshShape{8, 1, 1, 1, "tp,sp,dp,pp"});
}

TEST(CommMesh, WrongWorldSizeIsAClearError) {
  try {
    ProcessMesh mesh(session().world(), MeshShape{3, 1, 1, 1, "tp,sp,dp,pp"});
    FAIL() << "a mesh of 3 ranks on 8 did not throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("needs 3 ranks"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tierzero::comm::test
