// A client's arrays, mipmapped arrays, texture and surface objects (doc/design/arrays.md): each
// command checked (shapes, formats, the memory a texture reads), the backend's objects kept in the
// client's resources; an array is freed once the work queued before its destroy is done.
#include <cmath>

#include "backend/array_shape.hpp"
#include "session/counter_ops.hpp"
#include "session/validation.hpp"
#include "session/worker.hpp"

namespace funnel::server {

namespace {

constexpr uint64_t kMaxDimension = 1u << 17;  // beyond any GPU's array limits: the driver checks the rest

bool shape_ok(const ipc::ArrayCreateCmd& c) {
  constexpr uint32_t known = ipc::kArrayLayered | ipc::kArraySurface | ipc::kArrayCubemap | ipc::kArrayGather;
  if (format_bytes(c.format) == 0 || (c.channels != 1 && c.channels != 2 && c.channels != 4)) return false;
  if ((c.flags & ~known) != 0 || c.levels > 32) return false;
  if (c.width == 0 || c.width > kMaxDimension || c.height > kMaxDimension || c.depth > kMaxDimension) return false;
  return c.height != 0 || c.depth == 0 || (c.flags & ipc::kArrayLayered) != 0;  // 1-D layered: width x layers
}

bool float_ok(float f) { return std::isfinite(f); }

}  // namespace

Status Worker::array_create(const ipc::CommandHeader& h, const ipc::ArrayCreateCmd& c) {
  if (Status st = check_device(h.device); st != Status::Success) return st;
  if (c.array_id == 0 || res_.arrays.contains(c.array_id) || res_.arrays.size() >= ipc::kMaxArrays || !shape_ok(c))
    return Status::InvalidValue;
  ArrayShape shape;
  shape.width = c.width;
  shape.height = c.height;
  shape.depth = c.depth;
  shape.format = c.format;
  shape.channels = c.channels;
  shape.flags = c.flags;
  shape.levels = c.levels;
  shape.element_bytes = format_bytes(c.format) * c.channels;
  const uint64_t bytes = array_bytes(shape);
  if (!res_.within_mem_limit(h.device, bytes)) return Status::MemoryAllocation;
  std::unique_ptr<BackendArray> a;
  if (Status st = backend_.array_create(h.device, shape, a); st != Status::Success) return st;
  res_.arrays.emplace(c.array_id, ArrayEntry{std::shared_ptr<BackendArray>(std::move(a)), 0, bytes, nullptr});
  res_.device_used[static_cast<size_t>(h.device)] += bytes;
  add(counters_.device_memory_bytes, bytes);
  answers_.answer(h);
  return Status::Success;
}

Status Worker::array_destroy(const ipc::CommandHeader& h, const ipc::ArrayCmd& c) {
  auto it = res_.arrays.find(c.array_id);
  if (it == res_.arrays.end() || it->second.mipmap != 0) return Status::InvalidValue;  // a level goes with its mipmap
  std::shared_ptr<BackendArray> gone = it->second.array;
  const uint64_t bytes = it->second.bytes;
  res_.device_used[static_cast<size_t>(gone->device)] -= bytes;
  sub(counters_.device_memory_bytes, bytes);
  res_.arrays.erase(it);
  // The levels of a mipmapped array go with it (their arrays stay alive while textures use them).
  std::erase_if(res_.arrays, [&](const auto& e) { return e.second.mipmap == c.array_id; });
  // Freed once the work queued before is done (a copy may still use it), as cudaFreeArray.
  completions_.when_drained(-1, h.reply_slot, h.seq, [gone = std::move(gone)](Status) mutable {
    gone.reset();
    return Status::Success;
  });
  return Status::Success;
}

Status Worker::array_level(const ipc::CommandHeader& h, const ipc::ArrayLevelCmd& c) {
  auto it = res_.arrays.find(c.mipmap_id);
  if (it == res_.arrays.end() || it->second.array->shape.levels == 0 || c.level >= it->second.array->shape.levels ||
      c.array_id == 0 || res_.arrays.contains(c.array_id) || res_.arrays.size() >= ipc::kMaxArrays)
    return Status::InvalidValue;
  std::unique_ptr<BackendArray> level;
  if (Status st = backend_.array_level(*it->second.array, c.level, level); st != Status::Success) return st;
  // The level's array keeps its mipmapped array's storage alive through the backend's object.
  res_.arrays.emplace(c.array_id,
                      ArrayEntry{std::shared_ptr<BackendArray>(std::move(level)), c.mipmap_id, 0, it->second.array});
  answers_.answer(h);
  return Status::Success;
}

Status Worker::tex_create(const ipc::CommandHeader& h, const ipc::TexCreateCmd& c) {
  if (Status st = check_device(h.device); st != Status::Success) return st;
  if (c.surface > 1 || c.res_type > 3 || (c.surface != 0 && c.res_type != 0)) return Status::InvalidValue;
  std::shared_ptr<BackendArray> array, parent;
  if (c.res_type <= 1) {
    auto it = res_.arrays.find(c.res_id);
    if (it == res_.arrays.end() || (it->second.array->shape.levels != 0) != (c.res_type == 1)) return Status::InvalidValue;
    array = it->second.array;
    parent = it->second.parent;  // a level: its mipmapped array outlives the object too
    if (array->device != h.device) return Status::InvalidValue;
  } else {
    if (format_bytes(c.format) == 0 || (c.channels != 1 && c.channels != 2 && c.channels != 4)) return Status::InvalidValue;
    uint64_t extent = c.size;
    if (c.res_type == 3 && region_extent(c.pitch, c.width * format_bytes(c.format) * c.channels, c.height, extent) != Status::Success)
      return Status::InvalidValue;
    if (extent == 0 || !res_.device_range_ok(c.address, extent)) return Status::InvalidValue;
  }
  if (c.surface == 0) {
    for (uint32_t m : c.address_mode)
      if (m > 3) return Status::InvalidValue;
    if (c.filter_mode > 1 || c.mipmap_filter_mode > 1 || (c.flags & ~0x7fu) != 0 || c.has_view > 1) return Status::InvalidValue;
    if (!float_ok(c.mipmap_level_bias) || !float_ok(c.min_mipmap_level_clamp) || !float_ok(c.max_mipmap_level_clamp))
      return Status::InvalidValue;
    for (float b : c.border_color)
      if (!float_ok(b)) return Status::InvalidValue;
  }
  if (res_.textures.size() >= ipc::kMaxArrays) return Status::InvalidValue;
  uint64_t handle = 0;
  if (Status st = backend_.texture_create(h.device, c, array.get(), handle); st != Status::Success) return st;
  res_.textures.emplace(handle, TextureEntry{h.device, c.surface != 0, std::move(array), std::move(parent)});
  answers_.answer(h, {handle});
  return Status::Success;
}

Status Worker::tex_destroy(const ipc::CommandHeader& h, const ipc::TexCmd& c) {
  auto it = res_.textures.find(c.handle);
  if (it == res_.textures.end() || it->second.surface != (c.surface != 0)) return Status::InvalidValue;
  const Status st = backend_.texture_destroy(it->second.device, c.handle, it->second.surface);
  res_.textures.erase(it);
  if (st != Status::Success) return st;
  answers_.answer(h);
  return Status::Success;
}

}  // namespace funnel::server
