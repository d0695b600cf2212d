// The C API's pure functions, which need no daemon: names of statuses and dtypes.
#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "nodecomm.h"

namespace {

TEST(CApi, StatusStringsAreStaticAndDistinct) {
  // Both pointers must stay valid together, as in one printf with two of them.
  const char* permission = nc_status_string(NC_ERR_PERMISSION);
  const char* lost = nc_status_string(NC_ERR_DAEMON_LOST);
  EXPECT_STREQ(permission, "permission denied");
  EXPECT_STREQ(lost, "daemon lost");
  EXPECT_STREQ(nc_status_string(NC_OK), "ok");
  EXPECT_STREQ(permission, "permission denied");
}

TEST(CApi, UnknownStatusHasAName) {
  const char* name = nc_status_string(static_cast<nc_status_t>(9999));
  ASSERT_NE(name, nullptr);
  EXPECT_STREQ(name, "unknown status");
}

TEST(CApi, DtypeNamesRoundTrip) {
  for (int t = NC_F32; t <= NC_U8; ++t) {
    const char* name = nc_dtype_name(static_cast<nc_dtype_t>(t));
    ASSERT_NE(name, nullptr) << "dtype " << t;
    nc_dtype_t parsed{};
    ASSERT_EQ(nc_dtype_parse(name, &parsed), NC_OK) << name;
    EXPECT_EQ(static_cast<int>(parsed), t) << name;
    EXPECT_GT(nc_dtype_size(parsed), 0U) << name;
  }
  nc_dtype_t parsed{};
  EXPECT_EQ(nc_dtype_parse("f33", &parsed), NC_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(nc_last_error()).find("unknown dtype 'f33'"), std::string::npos)
      << nc_last_error();
  EXPECT_EQ(nc_dtype_name(static_cast<nc_dtype_t>(-1)), nullptr);
}

}  // namespace
