// MeshLayout's arithmetic (one process, no MPI): coordinates round-trip, each group holds the
// ranks that share the other coordinates, the order decides which ranks are neighbours, and bad
// shapes are clear errors. Also the sharding helpers for sizes that do not divide evenly.
#include <gtest/gtest.h>

#include <set>

#include "tierzero/comm/communicator.hpp"
#include "tierzero/comm/mesh.hpp"
#include "tierzero/core/error.hpp"

namespace tierzero::comm {
namespace {

const MeshDim kAll[] = {MeshDim::dp, MeshDim::tp, MeshDim::pp, MeshDim::sp};

void check_layout(const MeshShape& shape) {
  MeshLayout layout(shape);
  ASSERT_EQ(layout.world_size(), shape.world_size());
  std::set<MeshCoord> seen;
  for (int r = 0; r < layout.world_size(); ++r) {
    const MeshCoord c = layout.coords(r);
    EXPECT_EQ(layout.rank_of(c), r);
    seen.insert(c);
    for (MeshDim d : kAll) {
      const std::vector<int> g = layout.group_ranks(d, r);
      ASSERT_EQ(static_cast<int>(g.size()), shape.extent(d));
      EXPECT_EQ(g[static_cast<size_t>(c[static_cast<size_t>(d)])], r);
      for (size_t k = 0; k < g.size(); ++k) {
        MeshCoord other = layout.coords(g[k]);
        EXPECT_EQ(other[static_cast<size_t>(d)], static_cast<int>(k));
        other[static_cast<size_t>(d)] = c[static_cast<size_t>(d)];
        EXPECT_EQ(other, c) << "group members differ only along " << mesh_dim_name(d);
      }
    }
    EXPECT_EQ(static_cast<int>(layout.partition_group_ranks(r).size()), shape.dp * shape.sp);
  }
  EXPECT_EQ(static_cast<int>(seen.size()), layout.world_size());
}

TEST(MeshLayout, EveryLayoutIsConsistent) {
  for (const char* order : {"tp,sp,dp,pp", "dp,tp,pp,sp", "pp,dp,sp,tp"}) {
    check_layout(MeshShape{2, 2, 2, 1, order});
    check_layout(MeshShape{2, 1, 1, 4, order});
    check_layout(MeshShape{3, 2, 1, 2, order});
    check_layout(MeshShape{1, 1, 1, 1, order});
  }
}

TEST(MeshLayout, OrderDecidesNeighbours) {
  MeshLayout tp_inner(MeshShape{2, 2, 2, 1, "tp,sp,dp,pp"});
  EXPECT_EQ(tp_inner.group_ranks(MeshDim::tp, 0), (std::vector<int>{0, 1}));
  EXPECT_EQ(tp_inner.group_ranks(MeshDim::dp, 0), (std::vector<int>{0, 2}));
  EXPECT_EQ(tp_inner.group_ranks(MeshDim::pp, 0), (std::vector<int>{0, 4}));
  EXPECT_EQ(tp_inner.partition_group_ranks(5), (std::vector<int>{5, 7}));
  MeshLayout dp_inner(MeshShape{2, 2, 2, 1, "dp,tp,pp,sp"});
  EXPECT_EQ(dp_inner.group_ranks(MeshDim::dp, 0), (std::vector<int>{0, 1}));
  EXPECT_EQ(dp_inner.group_ranks(MeshDim::tp, 1), (std::vector<int>{1, 3}));
  MeshLayout sp(MeshShape{2, 1, 1, 4, "tp,sp,dp,pp"});
  EXPECT_EQ(sp.group_ranks(MeshDim::sp, 5), (std::vector<int>{4, 5, 6, 7}));
  EXPECT_EQ(sp.group_ranks(MeshDim::dp, 5), (std::vector<int>{1, 5}));
  EXPECT_EQ(sp.partition_group_ranks(5).size(), 8u);
}

TEST(MeshLayout, BadShapesAreClearErrors) {
  EXPECT_THROW(MeshLayout(MeshShape{0, 1, 1, 1, "tp,sp,dp,pp"}), Error);
  EXPECT_THROW(MeshLayout(MeshShape{1, 1, 1, 1, "tp,sp,dp"}), Error);
  EXPECT_THROW(MeshLayout(MeshShape{1, 1, 1, 1, "tp,tp,dp,pp"}), Error);
  try {
    MeshLayout(MeshShape{1, 1, 1, 1, "tp,sp,xx,pp"});
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("unknown dimension \"xx\""), std::string::npos);
  }
}

TEST(Sharding, UnevenSizesArePaddedToEqualShards) {
  EXPECT_EQ(shard_count(1001, 4), 251u);
  EXPECT_EQ(padded_count(1001, 4), 1004u);
  EXPECT_EQ(owned_count(1001, 4, 3), 248u);
  EXPECT_EQ(owned_count(1001, 4, 0), 251u);
  EXPECT_EQ(owned_count(2, 4, 3), 0u);  // more ranks than elements: the last shards are padding
  for (int n = 1; n <= 9; ++n)
    for (size_t total : {size_t{0}, size_t{1}, size_t{7}, size_t{1000}, size_t{4099}}) {
      size_t sum = 0;
      for (int r = 0; r < n; ++r) sum += owned_count(total, n, r);
      EXPECT_EQ(sum, total);
      EXPECT_EQ(padded_count(total, n) % static_cast<size_t>(n), 0u);
    }
}

TEST(CommOptions, TimeoutFromEnvironment) {
  setenv("TIERZERO_COMM_TIMEOUT_S", "2.5", 1);
  EXPECT_EQ(CommOptions::from_env().timeout_s, 2.5);
  setenv("TIERZERO_COMM_TIMEOUT_S", "soon", 1);
  EXPECT_THROW(CommOptions::from_env(), Error);
  unsetenv("TIERZERO_COMM_TIMEOUT_S");
  EXPECT_EQ(CommOptions::from_env().timeout_s, 300.0);
}

}  // namespace
}  // namespace tierzero::comm
