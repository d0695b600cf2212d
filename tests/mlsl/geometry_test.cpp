// The MLSL layer's arithmetic (mlsl/src/geometry.cpp) against a brute-force grouping and the
// worked tables of the design (docs/MLSL.md once the layer is complete; issue 22).
#include "geometry.hpp"

#include <gtest/gtest.h>

#include <map>
#include <set>
#include <stdexcept>
#include <vector>

namespace nodecomm::mlsl {
namespace {

// Every (world <= 16, D, M) with D×M dividing the world: the colors form groups of the right
// sizes, a group's members are exactly MLSL's (model: M consecutive processes of a replica;
// data: D processes M apart), indices are the rank order inside the group, and a model group
// and a data group meet in exactly one process.
TEST(MlslGeometry, GridLayoutMatchesBruteForceGrouping) {
  for (int world = 1; world <= 16; ++world) {
    for (int d = 1; d <= world; ++d) {
      for (int m = 1; d * m <= world; ++m) {
        if (world % (d * m) != 0) continue;
        std::map<int, std::vector<int>> model_groups;
        std::map<int, std::vector<int>> data_groups;
        std::vector<GroupLayout> layouts;
        for (int g = 0; g < world; ++g) {
          layouts.push_back(grid_layout(g, world, d, m));
          model_groups[layouts.back().model_color].push_back(g);
          data_groups[layouts.back().data_color].push_back(g);
        }
        ASSERT_EQ(model_groups.size(), static_cast<size_t>(world / m)) << world << d << m;
        ASSERT_EQ(data_groups.size(), static_cast<size_t>(world / d)) << world << d << m;
        for (int g = 0; g < world; ++g) {
          const auto& l = layouts[static_cast<size_t>(g)];
          const int cell = d * m;
          const int base = (g / cell) * cell;
          std::vector<int> model_expected;
          std::vector<int> data_expected;
          for (int i = 0; i < m; ++i) model_expected.push_back(base + ((g - base) / m) * m + i);
          for (int i = 0; i < d; ++i) data_expected.push_back(base + (g - base) % m + i * m);
          EXPECT_EQ(model_groups[l.model_color], model_expected) << "g " << g;
          EXPECT_EQ(data_groups[l.data_color], data_expected) << "g " << g;
          EXPECT_EQ(model_expected[static_cast<size_t>(l.model_index)], g);
          EXPECT_EQ(data_expected[static_cast<size_t>(l.data_index)], g);
          EXPECT_EQ(l.model_size, m);
          EXPECT_EQ(l.data_size, d);
          std::set<int> meet;
          for (int a : model_groups[l.model_color]) {
            for (int b : data_groups[l.data_color]) {
              if (a == b) meet.insert(a);
            }
          }
          EXPECT_EQ(meet, std::set<int>{g});
        }
      }
    }
  }
}

// The design's table for 4 processes, D = 2, M = 2, global minibatch 16.
TEST(MlslGeometry, FourProcessesTwoByTwo) {
  const int model_index[] = {0, 1, 0, 1};
  const int data_index[] = {0, 0, 1, 1};
  const size_t offset[] = {0, 0, 8, 8};
  for (int g = 0; g < 4; ++g) {
    const auto l = grid_layout(g, 4, 2, 2);
    EXPECT_EQ(l.model_index, model_index[g]);
    EXPECT_EQ(l.data_index, data_index[g]);
    const auto mb = minibatch_slice(16, l.data_size, l.data_index);
    EXPECT_EQ(mb.local, 8U);
    EXPECT_EQ(mb.offset, offset[g]);
  }
  // Replicas: D = 2, M = 1 on 4 processes: {0,1} and {2,3} sum their gradients separately.
  EXPECT_EQ(grid_layout(2, 4, 2, 1).data_color, grid_layout(3, 4, 2, 1).data_color);
  EXPECT_NE(grid_layout(1, 4, 2, 1).data_color, grid_layout(2, 4, 2, 1).data_color);
  EXPECT_EQ(grid_layout(3, 4, 2, 1).replica, 1);
}

TEST(MlslGeometry, RefusesWhatMlslRefuses) {
  EXPECT_THROW(grid_layout(0, 6, 4, 1), std::invalid_argument);  // 6 not a multiple of 4
  EXPECT_THROW(grid_layout(0, 4, 0, 1), std::invalid_argument);
  EXPECT_THROW(grid_layout(0, 4, 1, -2), std::invalid_argument);
  EXPECT_THROW(grid_layout(4, 4, 2, 2), std::invalid_argument);
  try {
    grid_layout(0, 6, 4, 1);
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("6 processes into 4 data x 1 model"), std::string::npos)
        << e.what();
  }
}

// The design's ParameterSet table: 4 processes, D = 2, M = 2, K = 32768 kernels.
TEST(MlslGeometry, ParameterPartitionTable) {
  for (int g = 0; g < 4; ++g) {
    const auto l = grid_layout(g, 4, 2, 2);
    const auto plain =
        parameter_partition(32768, l.model_size, l.model_index, l.data_size, l.data_index, false);
    EXPECT_EQ(plain.local, 16384U);
    EXPECT_EQ(plain.global_offset, l.model_index == 0 ? 0U : 16384U);
    EXPECT_EQ(plain.owned, 16384U);
    EXPECT_EQ(plain.owned_offset, 0U);
    EXPECT_TRUE(plain.exchange);
    const auto du =
        parameter_partition(32768, l.model_size, l.model_index, l.data_size, l.data_index, true);
    EXPECT_EQ(du.local, 16384U);
    EXPECT_EQ(du.owned, 8192U);
    EXPECT_EQ(du.owned_offset, l.data_index == 0 ? 0U : 8192U);
  }
  // Odd: K = 10 over M = 2 (local 5), D = 2 with distributed update: owned 3, padded to 6.
  const auto odd = parameter_partition(10, 2, 1, 2, 1, true);
  EXPECT_EQ(odd.local, 6U);
  EXPECT_EQ(odd.global_offset, 5U);
  EXPECT_EQ(odd.owned, 3U);
  EXPECT_EQ(odd.owned_offset, 3U);
  // The remainder of K / M is dropped, as in MLSL; one data part needs no exchange.
  const auto one = parameter_partition(7, 2, 1, 1, 0, true);
  EXPECT_EQ(one.local, 3U);
  EXPECT_EQ(one.global_offset, 3U);
  EXPECT_EQ(one.owned, 3U);
  EXPECT_FALSE(one.exchange);
}

}  // namespace
}  // namespace nodecomm::mlsl
