// The one byte-size grammar (ipc/byte_size.hpp) that nodecommd, the client library,
// nodecommctl and nodecomm-bench share, and its formatters.
#include "nodecomm/ipc/byte_size.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>

namespace nodecomm::ipc {
namespace {

uint64_t parsed(const char* text) {
  std::string why;
  const auto v = parse_byte_size(text, why);
  EXPECT_TRUE(v.has_value()) << "'" << text << "' refused: " << why;
  EXPECT_TRUE(why.empty()) << text;
  return v.value_or(0);
}

std::string refused(const char* text) {
  std::string why;
  const auto v = parse_byte_size(text, why);
  EXPECT_FALSE(v.has_value()) << "'" << text << "' read as " << v.value_or(0);
  EXPECT_FALSE(why.empty()) << text;
  return why;
}

TEST(ByteSize, PlainNumbers) {
  EXPECT_EQ(parsed("0"), 0u);
  EXPECT_EQ(parsed("4096"), 4096u);
  EXPECT_EQ(parsed("16396"), 16396u);
  EXPECT_EQ(parsed("007"), 7u);
  EXPECT_EQ(parsed("18446744073709551615"), UINT64_MAX);
}

// What the daemon's, the library's and the bench's parsers each accepted before.
TEST(ByteSize, EveryFormerSpelling) {
  EXPECT_EQ(parsed("8B"), 8u);
  for (const char* k : {"4K", "4k", "4KiB"}) EXPECT_EQ(parsed(k), uint64_t{4} << 10) << k;
  for (const char* m : {"64M", "64m", "64MiB"}) EXPECT_EQ(parsed(m), uint64_t{64} << 20) << m;
  for (const char* g : {"1G", "1g", "1GiB"}) EXPECT_EQ(parsed(g), uint64_t{1} << 30) << g;
}

TEST(ByteSize, UnitsAreCaseInsensitivePowersOf1024) {
  EXPECT_EQ(parsed("8b"), 8u);
  for (const char* s : {"2KB", "2kb", "2Ki", "2ki", "2kib", "2KIB"}) {
    EXPECT_EQ(parsed(s), uint64_t{2} << 10) << s;
  }
  for (const char* s : {"3MB", "3Mi", "3mib"}) EXPECT_EQ(parsed(s), uint64_t{3} << 20) << s;
  for (const char* s : {"5GB", "5Gi", "5gib"}) EXPECT_EQ(parsed(s), uint64_t{5} << 30) << s;
  for (const char* s : {"2T", "2t", "2TB", "2Ti", "2TiB"}) {
    EXPECT_EQ(parsed(s), uint64_t{2} << 40) << s;
  }
}

TEST(ByteSize, Garbage) {
  EXPECT_NE(refused("").find("empty"), std::string::npos);
  for (const char* s : {"-1", "+1", " 8", "M", "K4", "x", ".5M"}) {
    EXPECT_NE(refused(s).find("not a number"), std::string::npos) << s;
  }
  for (const char* s :
       {"12Q", "0x10", "8 ", "1.5M", "64MiBs", "64BB", "4KK", "1E", "1P", "4iB", "4i"}) {
    EXPECT_NE(refused(s).find("unknown unit"), std::string::npos) << s;
  }
  EXPECT_NE(refused("12Q").find("'Q'"), std::string::npos);
}

TEST(ByteSize, Overflow) {
  // One more than 2^64 - 1, and far more: never wrapped into a small size.
  EXPECT_NE(refused("18446744073709551616").find("more than"), std::string::npos);
  refused("99999999999999999999999999");
  // Within 64 bits as digits, over them once scaled.
  refused("16777216T");           // 2^24 TiB = 2^64
  refused("17179869184G");        // 2^34 GiB = 2^64
  refused("18014398509481984K");  // 2^54 KiB = 2^64
  EXPECT_EQ(parsed("16777215T"), uint64_t{16777215} << 40);
  EXPECT_EQ(parsed("18014398509481983K"), uint64_t{18014398509481983} << 10);
}

TEST(ByteSize, FormatReadsBack) {
  EXPECT_EQ(format_byte_size(0), "0");
  EXPECT_EQ(format_byte_size(1000), "1000");
  EXPECT_EQ(format_byte_size(512 << 10), "512K");
  EXPECT_EQ(format_byte_size(uint64_t{64} << 20), "64M");
  EXPECT_EQ(format_byte_size(uint64_t{1} << 30), "1G");
  EXPECT_EQ(format_byte_size(uint64_t{1} << 40), "1024G");
  EXPECT_EQ(format_byte_size((uint64_t{1} << 20) + 1024), "1025K");
  for (uint64_t v : {uint64_t{0}, uint64_t{7}, uint64_t{3} << 10, uint64_t{5} << 30,
                     (uint64_t{1} << 40) + 4096, UINT64_MAX}) {
    EXPECT_EQ(parsed(format_byte_size(v).c_str()), v) << v;
  }
}

TEST(ByteSize, Human) {
  EXPECT_EQ(human_bytes(0), "0 B");
  EXPECT_EQ(human_bytes(1023), "1023 B");
  EXPECT_EQ(human_bytes(1536), "1.5 KiB");
  EXPECT_EQ(human_bytes(64.0 * 1048576), "64.0 MiB");
  EXPECT_EQ(human_bytes(3.0 * 1099511627776.0 * 1024), "3072.0 TiB");
}

}  // namespace
}  // namespace nodecomm::ipc
