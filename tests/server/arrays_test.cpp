// Array, texture and surface commands against the server (sim backend): arrays made and checked,
// copies into and out of array regions (rows and slices), what the worker refuses (formats,
// regions past an edge or across a slice, pitches that are not the array's rows, unknown ids),
// mipmap levels, texture objects of arrays and of the client's memory only, and frees.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "fixture.hpp"
#include "test_client.hpp"

namespace funnel::test {
namespace {

constexpr uint32_t kFloat = 0x20, kU8 = 0x01;

ipc::ArrayCreateCmd array_cmd(uint64_t id, uint64_t w, uint64_t h, uint64_t d, uint32_t format = kFloat,
                              uint32_t channels = 1, uint32_t flags = 0, uint32_t levels = 0) {
  return ipc::ArrayCreateCmd{id, w, h, d, format, channels, flags, levels};
}

// A copy between device memory `dev` (pitch `pitch`) and array `id` at byte offset `off` of its
// rows and slices laid end to end.
ipc::CopyCmd array_copy(bool to_array, uint64_t id, uint64_t off, uint64_t row, uint64_t dev, uint64_t pitch,
                        uint64_t width, uint64_t height) {
  ipc::CopyCmd c{};
  const ipc::Location a{ipc::MemSpace::Array, 0, id, off};
  const ipc::Location d{ipc::MemSpace::Device, 0, 0, dev};
  c.dst = to_array ? a : d;
  c.src = to_array ? d : a;
  c.dst_pitch = to_array ? row : pitch;
  c.src_pitch = to_array ? pitch : row;
  c.width = width;
  c.height = height;
  return c;
}

TEST_F(ServerTest, ArraysHoldRegionsAndRefuseWhatIsNotTheirs) {
  start_server();
  TestClient c(run_dir_);
  ASSERT_TRUE(c.ok());
  // A 3-D float array 8 x 4 x 3: rows of 32 bytes, slices of 128.
  ASSERT_EQ(c.call(Opcode::ArrayCreate, array_cmd(1, 8, 4, 3)).status, Status::Success);
  EXPECT_EQ(c.call(Opcode::ArrayCreate, array_cmd(1, 8, 4, 3)).status, Status::InvalidValue) << "an id in use";
  EXPECT_EQ(c.call(Opcode::ArrayCreate, array_cmd(2, 8, 4, 0, 0x7)).status, Status::InvalidValue) << "no such format";
  EXPECT_EQ(c.call(Opcode::ArrayCreate, array_cmd(2, 8, 4, 0, kFloat, 3)).status, Status::InvalidValue) << "3 channels";
  EXPECT_EQ(c.call(Opcode::ArrayCreate, array_cmd(2, 0, 4, 0)).status, Status::InvalidValue) << "no width";
  EXPECT_EQ(c.call(Opcode::ArrayCreate, array_cmd(2, 8, 0, 4)).status, Status::InvalidValue) << "depth without height";
  EXPECT_EQ(c.call(Opcode::ArrayCreate, array_cmd(2, 8, 4, 0, kFloat, 1, 0x100)).status, Status::InvalidValue);
  constexpr uint64_t kRow = 32, kSlice = 128, kBytes = 384;
  const uint64_t dev = c.alloc(kBytes), back = c.alloc(kBytes);
  std::vector<uint8_t> in(kBytes), out(kBytes, 0);
  for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<uint8_t>(i * 7 + 1);
  c.h2d(dev, in.data(), kBytes);
  // Slice by slice in (each 4 rows), whole out the same way, then compared.
  for (uint64_t z = 0; z < 3; ++z) {
    EXPECT_EQ(c.call(Opcode::Copy, array_copy(true, 1, z * kSlice, kRow, dev + z * kSlice, kRow, kRow, 4)).status,
              Status::Success);
    EXPECT_EQ(c.call(Opcode::Copy, array_copy(false, 1, z * kSlice, kRow, back + z * kSlice, kRow, kRow, 4)).status,
              Status::Success);
  }
  c.d2h(out.data(), back, kBytes);
  EXPECT_EQ(out, in);
  // A region of 8 bytes x 2 rows at x 16, row 1 of slice 2 (its bytes where the layout says).
  const std::vector<uint8_t> zeros(kBytes, 0);
  c.h2d(back, zeros.data(), kBytes);
  EXPECT_EQ(c.call(Opcode::Copy, array_copy(false, 1, 2 * kSlice + kRow + 16, kRow, back, 8, 8, 2)).status,
            Status::Success);
  c.d2h(out.data(), back, 16);
  for (int r = 0; r < 2; ++r)
    for (int x = 0; x < 8; ++x)
      EXPECT_EQ(out[r * 8 + x], in[2 * kSlice + (1 + r) * kRow + 16 + x]) << r << "," << x;
  // Refused: past the right edge, across a slice, a pitch that is not the row, past the last slice,
  // an unknown array.
  EXPECT_EQ(c.call(Opcode::Copy, array_copy(true, 1, 24, kRow, dev, 16, 16, 1)).status, Status::InvalidValue);
  EXPECT_EQ(c.call(Opcode::Copy, array_copy(true, 1, 2 * kRow, kRow, dev, kRow, kRow, 3)).status, Status::InvalidValue);
  EXPECT_EQ(c.call(Opcode::Copy, array_copy(true, 1, 0, 64, dev, kRow, kRow, 2)).status, Status::InvalidValue);
  EXPECT_EQ(c.call(Opcode::Copy, array_copy(true, 1, 3 * kSlice, kRow, dev, kRow, kRow, 1)).status, Status::InvalidValue);
  EXPECT_EQ(c.call(Opcode::Copy, array_copy(true, 9, 0, kRow, dev, kRow, kRow, 1)).status, Status::InvalidValue);
  c.take_deferred();

  // A mipmapped 2-D array of 3 levels (uchar4): level 1 is 4 x 2.
  ASSERT_EQ(c.call(Opcode::ArrayCreate, array_cmd(3, 8, 4, 0, kU8, 4, 0, 3)).status, Status::Success);
  EXPECT_EQ(c.call(Opcode::Copy, array_copy(true, 3, 0, 32, dev, 32, 32, 1)).status, Status::InvalidValue)
      << "a mipmapped array is no copy end";
  c.take_deferred();
  EXPECT_EQ(c.call(Opcode::ArrayLevel, ipc::ArrayLevelCmd{3, 4, 3, 0}).status, Status::InvalidValue) << "level 3 of 3";
  ASSERT_EQ(c.call(Opcode::ArrayLevel, ipc::ArrayLevelCmd{3, 4, 1, 0}).status, Status::Success);
  EXPECT_EQ(c.call(Opcode::Copy, array_copy(true, 4, 0, 16, dev, 16, 16, 2)).status, Status::Success);
  EXPECT_EQ(c.call(Opcode::Copy, array_copy(true, 4, 0, 16, dev, 16, 16, 3)).status, Status::InvalidValue)
      << "level 1 has 2 rows";
  c.take_deferred();
  EXPECT_EQ(c.call(Opcode::ArrayDestroy, ipc::ArrayCmd{4}).status, Status::InvalidValue) << "a level goes with its mipmap";

  // Texture objects: of an array, of the client's memory; not of memory it does not hold.
  ipc::TexCreateCmd t{};
  t.res_type = 0;
  t.res_id = 1;
  const Reply tex = c.call(Opcode::TexCreate, t);
  ASSERT_EQ(tex.status, Status::Success);
  EXPECT_NE(tex.value[0], 0u);
  ipc::TexCreateCmd lin{};
  lin.res_type = 2;
  lin.address = dev;
  lin.format = kFloat;
  lin.channels = 1;
  lin.size = kBytes;
  EXPECT_EQ(c.call(Opcode::TexCreate, lin).status, Status::Success);
  lin.size = kBytes + 4;
  EXPECT_EQ(c.call(Opcode::TexCreate, lin).status, Status::InvalidValue) << "past the allocation";
  lin.size = kBytes;
  lin.address_mode[0] = 9;
  EXPECT_EQ(c.call(Opcode::TexCreate, lin).status, Status::InvalidValue) << "an address mode CUDA does not have";
  ipc::TexCreateCmd surf{};
  surf.surface = 1;
  surf.res_type = 2;
  EXPECT_EQ(c.call(Opcode::TexCreate, surf).status, Status::InvalidValue) << "a surface of linear memory";
  t.res_id = 3;
  EXPECT_EQ(c.call(Opcode::TexCreate, t).status, Status::InvalidValue) << "a mipmapped array as an array";
  EXPECT_EQ(c.call(Opcode::TexDestroy, ipc::TexCmd{tex.value[0], 1, 0}).status, Status::InvalidValue) << "not a surface";
  EXPECT_EQ(c.call(Opcode::TexDestroy, ipc::TexCmd{tex.value[0], 0, 0}).status, Status::Success);
  EXPECT_EQ(c.call(Opcode::TexDestroy, ipc::TexCmd{tex.value[0], 0, 0}).status, Status::InvalidValue);

  // Freed: later copies are refused; the mipmapped array takes its level along.
  EXPECT_EQ(c.call(Opcode::ArrayDestroy, ipc::ArrayCmd{1}).status, Status::Success);
  EXPECT_EQ(c.call(Opcode::Copy, array_copy(true, 1, 0, kRow, dev, kRow, kRow, 1)).status, Status::InvalidValue);
  EXPECT_EQ(c.call(Opcode::ArrayDestroy, ipc::ArrayCmd{3}).status, Status::Success);
  EXPECT_EQ(c.call(Opcode::Copy, array_copy(true, 4, 0, 16, dev, 16, 16, 1)).status, Status::InvalidValue);
  c.take_deferred();
  // A client that leaves with arrays and objects: the server frees them, the next client is served.
  ASSERT_EQ(c.call(Opcode::ArrayCreate, array_cmd(5, 64, 64, 0)).status, Status::Success);
  t.res_id = 5;
  ASSERT_EQ(c.call(Opcode::TexCreate, t).status, Status::Success);
  c.detach();
  TestClient next(run_dir_);
  ASSERT_TRUE(next.ok());
  EXPECT_EQ(next.call(Opcode::ArrayCreate, array_cmd(5, 64, 64, 0)).status, Status::Success);
}

}  // namespace
}  // namespace funnel::test
