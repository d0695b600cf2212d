// The names the service's job formations publish in Open MPI's rendezvous server
// (daemon/mpi/rendezvous.hpp): a job's key can never reach into another key's names.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "mpi/rendezvous.hpp"

namespace nodecomm::daemon {
namespace {

TEST(RendezvousNames, PlainKeysStayReadable) {
  EXPECT_EQ(rendezvous_base("1000.train-run_7"), "nodecomm:1000.train-run_7");
  EXPECT_EQ(generation_name("nodecomm:k", 3), "nodecomm:k#3");
  EXPECT_EQ(joiner_name("nodecomm:k", 3, 2), "nodecomm:k#3:2");
}

TEST(RendezvousNames, SeparatorsAreEncoded) {
  // '#', ':', '/', '%' and spaces would otherwise let one key spell another's names.
  EXPECT_EQ(rendezvous_base("a#1:2/b c%"), "nodecomm:a%231%3A2%2Fb%20c%25");
  EXPECT_NE(rendezvous_base("a_b"), rendezvous_base("a b"));
  EXPECT_NE(rendezvous_base("a#0"), generation_name(rendezvous_base("a"), 0));
}

TEST(RendezvousNames, LongKeysAreShortenedDistinctly) {
  const std::string long_a(500, 'a');
  std::string long_b = long_a;
  long_b.back() = 'b';
  const std::string a = rendezvous_base(long_a);
  const std::string b = rendezvous_base(long_b);
  EXPECT_LE(a.size(), 200U);
  EXPECT_NE(a, b);
}

TEST(RendezvousNames, EveryNameOfAFormationIsDistinct) {
  const std::string base = rendezvous_base("job");
  std::set<std::string> names;
  size_t count = 0;
  for (uint32_t g = 0; g < 3; ++g) {
    names.insert(generation_name(base, g));
    ++count;
    for (uint32_t n = 1; n < 4; ++n) {
      names.insert(joiner_name(base, g, n));
      ++count;
      for (uint32_t a = 0; a < 3; ++a) {
        names.insert(ping_name(base, g, n, a));
        names.insert(answer_name(base, g, n, a));
        names.insert(go_name(base, g, n, a));
        names.insert(ack_name(base, g, n, a, true));
        names.insert(ack_name(base, g, n, a, false));
        count += 5;
      }
    }
  }
  EXPECT_EQ(names.size(), count);
  EXPECT_NE(link_id(base, 0, 1, 0), link_id(base, 0, 1, 1));
  EXPECT_NE(link_id(base, 0, 1, 0), link_id(base, 1, 1, 0));
}

}  // namespace
}  // namespace nodecomm::daemon
