// Descriptor validation: each malformed field is rejected with the right status and a message
// that names the field.
#include "nodecomm/ipc/validate.hpp"

#include <gtest/gtest.h>

#include <cstring>

namespace nodecomm::ipc {
namespace {

using proto::Status;

proto::OpDescriptor good() {
  proto::OpDescriptor d{};
  d.correlation_id = 1;
  d.seq = 1;
  d.count = 16;
  d.send_offset = 0;
  d.recv_offset = 4096;
  d.collective = static_cast<uint16_t>(proto::Collective::kAllreduce);
  d.dtype = static_cast<uint8_t>(proto::DType::kF32);
  d.redop = static_cast<uint8_t>(proto::RedOp::kSum);
  return d;
}

const ValidationLimits kLimits{8192, uint64_t{1} << 40};

void expect_rejected(const proto::OpDescriptor& d, Status status, const char* words) {
  const Verdict v = validate_descriptor(d, kLimits);
  EXPECT_EQ(v.status, status) << v.message;
  EXPECT_NE(v.message.find(words), std::string::npos) << v.message;
}

TEST(Validate, AcceptsAGoodDescriptor) {
  EXPECT_TRUE(validate_descriptor(good(), kLimits).ok());
}

TEST(Validate, AcceptsInPlaceAndZeroCount) {
  auto d = good();
  d.flags = proto::kOpFlagInPlace;
  d.recv_offset = d.send_offset;
  EXPECT_TRUE(validate_descriptor(d, kLimits).ok());
  d.count = 0;
  d.send_offset = d.recv_offset = 8192;  // empty range at the very end is inside
  EXPECT_TRUE(validate_descriptor(d, kLimits).ok());
}

TEST(Validate, RejectsOffsetsOutsideTheArena) {
  auto d = good();
  d.send_offset = 8192 - 32;  // 16 floats = 64 bytes would run past the end
  expect_rejected(d, Status::kOutOfRange, "send buffer");
  d = good();
  d.recv_offset = UINT64_MAX - 8;  // offset + bytes would wrap around
  expect_rejected(d, Status::kOutOfRange, "receive buffer");
}

TEST(Validate, RegisteredRegions) {
  const uint64_t sizes[2] = {4096, 100};
  ValidationLimits limits = kLimits;
  limits.region_bytes = sizes;
  limits.region_count = 2;
  auto d = good();
  d.send_offset = proto::region_offset(0, 4096 - 64);  // the last 64 bytes of region 0
  d.recv_offset = proto::region_offset(1, 36);         // the last 64 bytes of region 1
  EXPECT_TRUE(validate_descriptor(d, limits).ok()) << validate_descriptor(d, limits).message;
  d.flags = proto::kOpFlagInPlace;  // in place within one region
  d.recv_offset = d.send_offset;
  EXPECT_TRUE(validate_descriptor(d, limits).ok());

  const auto rejected = [&](const proto::OpDescriptor& bad, const char* words) {
    const Verdict v = validate_descriptor(bad, limits);
    EXPECT_EQ(v.status, Status::kOutOfRange) << v.message;
    EXPECT_NE(v.message.find(words), std::string::npos) << v.message;
  };
  d = good();
  d.send_offset = proto::region_offset(1, 40);  // 64 bytes from 40 run past 100
  rejected(d, "send buffer [offset 40, +64 bytes) of registered region 1 lies outside its 100");
  d = good();
  d.recv_offset = proto::region_offset(2, 0);  // never registered
  rejected(d, "receive buffer names registered region 2, and 2 region(s) are registered");
  d = good();
  d.send_offset = proto::region_offset(0, proto::kRegionOffsetMask);  // huge offset inside
  rejected(d, "of registered region 0");
  // Without regions (the default limits) any region offset is refused.
  d = good();
  d.send_offset = proto::region_offset(0, 0);
  expect_rejected(d, Status::kOutOfRange, "names registered region 0, and 0 region(s)");
  // Alignment is checked within the region as within the arena.
  d = good();
  d.send_offset = proto::region_offset(0, 2);
  const Verdict v = validate_descriptor(d, limits);
  EXPECT_EQ(v.status, Status::kInvalidArgument) << v.message;
}

TEST(Validate, RejectsCountsThatOverflowOrExceedTheLimit) {
  auto d = good();
  d.count = uint64_t{1} << 62;
  expect_rejected(d, Status::kInvalidArgument, "count");
  d.count = 3000;  // 12000 bytes > 8192-byte arena
  expect_rejected(d, Status::kOutOfRange, "outside");
}

TEST(Validate, RejectsUnknownEnumsFlagsAndReserved) {
  auto d = good();
  d.dtype = 200;
  expect_rejected(d, Status::kInvalidArgument, "dtype");
  d = good();
  d.redop = 9;
  expect_rejected(d, Status::kInvalidArgument, "reduction op");
  d = good();
  d.collective = 77;
  expect_rejected(d, Status::kInvalidArgument, "collective");
  d = good();
  d.flags = 0x80;
  expect_rejected(d, Status::kInvalidArgument, "flags");
  d = good();
  d.reserved[1] = 1;
  expect_rejected(d, Status::kInvalidArgument, "reserved");
  d = good();
  d.seq = 0;
  expect_rejected(d, Status::kInvalidArgument, "sequence");
}

TEST(Validate, RejectsMisalignedAndOverlappingBuffers) {
  auto d = good();
  d.send_offset = 2;
  expect_rejected(d, Status::kInvalidArgument, "aligned");
  d = good();
  d.recv_offset = 32;  // overlaps send [0, 64) without the in-place flag
  expect_rejected(d, Status::kInvalidArgument, "overlap");
  d = good();
  d.flags = proto::kOpFlagInPlace;  // in place but offsets differ
  expect_rejected(d, Status::kInvalidArgument, "in-place");
}

TEST(Validate, RejectsAvgOnIntegers) {
  auto d = good();
  d.dtype = static_cast<uint8_t>(proto::DType::kI32);
  d.redop = static_cast<uint8_t>(proto::RedOp::kAvg);
  expect_rejected(d, Status::kInvalidArgument, "avg");
}

TEST(Validate, TensorNameIsBoundedAndPrintable) {
  auto d = good();
  std::memset(d.name, 'x', sizeof(d.name));  // no terminator at all
  d.name[3] = '\x01';
  const std::string name = tensor_name(d);
  EXPECT_EQ(name.size(), sizeof(d.name));
  EXPECT_EQ(name[3], '?');
}

}  // namespace
}  // namespace nodecomm::ipc
