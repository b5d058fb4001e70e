// CUDA arrays, texture and surface objects in the client core (arrays.hpp, doc/design/arrays.md).
#include "arrays.hpp"

#include <algorithm>
#include <atomic>
#include <memory>
#include <mutex>
#include <unordered_map>

namespace funnel::client {

namespace {

struct Registry {
  std::mutex mu;
  std::unordered_map<const void*, std::unique_ptr<ArrayInfo>> arrays;
  std::unordered_map<uint64_t, TextureRecord> textures;  // by handle
};

Registry& reg() {
  static auto* r = new Registry;  // never destroyed: exit handlers may still call
  return *r;
}

std::atomic<uint64_t> g_next_array{1};

// Keeps `a` in the registry; *out is its handle.
cudaError_t keep(std::unique_ptr<ArrayInfo> a, void** out) {
  Registry& r = reg();
  std::lock_guard lk(r.mu);
  void* h = a.get();
  r.arrays.emplace(h, std::move(a));
  *out = h;
  return cudaSuccess;
}

uint64_t bytes_of(const ArrayInfo& a) {
  const ipc::ArrayCreateCmd& s = a.shape;
  return s.width * a.element_bytes * (s.height == 0 ? 1 : s.height) * (s.depth == 0 ? 1 : s.depth);
}

}  // namespace

uint32_t array_format_bytes(uint32_t format) noexcept {
  switch (format) {
    case 0x01: case 0x08: return 1;
    case 0x02: case 0x09: case 0x10: return 2;
    case 0x03: case 0x0a: case 0x20: return 4;
    default: return 0;
  }
}

cudaError_t array_create(void** out, uint64_t width, uint64_t height, uint64_t depth, uint32_t format,
                         uint32_t channels, uint32_t flags, uint32_t levels) {
  if (out == nullptr) return cudaErrorInvalidValue;
  if (array_format_bytes(format) == 0 || (channels != 1 && channels != 2 && channels != 4)) {
    report_unsupported("a CUDA array of this channel format");
    return cudaErrorNotSupported;
  }
  if (cudaError_t e = attach(); e != cudaSuccess) return e;
  auto a = std::make_unique<ArrayInfo>();
  a->id = g_next_array.fetch_add(1);
  a->device = current_device();
  a->shape = ipc::ArrayCreateCmd{a->id, width, height, depth, format, channels, flags, levels};
  a->element_bytes = array_format_bytes(format) * channels;
  if (cudaError_t e = to_cuda(Runtime::get().call(Opcode::ArrayCreate, a->device, 0, &a->shape, sizeof a->shape));
      e != cudaSuccess)
    return e;
  return keep(std::move(a), out);
}

cudaError_t array_destroy(const void* handle, bool mipmap) {
  if (handle == nullptr) return cudaSuccess;  // cudaFreeArray(nullptr), as CUDA
  std::unique_ptr<ArrayInfo> a;
  {
    Registry& r = reg();
    std::lock_guard lk(r.mu);
    auto it = r.arrays.find(handle);
    if (it == r.arrays.end() || it->second->mipmap != 0 || (it->second->shape.levels != 0) != mipmap)
      return cudaErrorInvalidValue;
    a = std::move(it->second);
    r.arrays.erase(it);
    std::erase_if(r.arrays, [&](const auto& e) { return e.second->mipmap == a->id; });
  }
  const ipc::ArrayCmd c{a->id};
  return to_cuda(Runtime::get().call(Opcode::ArrayDestroy, a->device, 0, &c, sizeof c));
}

cudaError_t array_level(void** out, const void* mipmap, unsigned level) {
  if (out == nullptr) return cudaErrorInvalidValue;
  std::optional<ArrayInfo> m = array_info(mipmap, true);
  if (!m) return cudaErrorInvalidResourceHandle;
  if (level >= m->shape.levels) return cudaErrorInvalidValue;
  auto a = std::make_unique<ArrayInfo>();
  a->id = g_next_array.fetch_add(1);
  a->device = m->device;
  a->mipmap = m->id;
  a->element_bytes = m->element_bytes;
  a->shape = m->shape;
  a->shape.array_id = a->id;
  a->shape.levels = 0;
  const auto shrink = [level](uint64_t v) { return v == 0 ? 0 : std::max<uint64_t>(1, v >> level); };
  a->shape.width = shrink(m->shape.width);
  a->shape.height = shrink(m->shape.height);
  if ((m->shape.flags & ipc::kArrayLayered) == 0) a->shape.depth = shrink(m->shape.depth);
  const ipc::ArrayLevelCmd c{m->id, a->id, level, 0};
  if (cudaError_t e = to_cuda(Runtime::get().call(Opcode::ArrayLevel, a->device, 0, &c, sizeof c)); e != cudaSuccess)
    return e;
  return keep(std::move(a), out);
}

std::optional<ArrayInfo> array_info(const void* handle, bool mipmap) {
  Registry& r = reg();
  std::lock_guard lk(r.mu);
  auto it = r.arrays.find(handle);
  if (it == r.arrays.end() || (it->second->shape.levels != 0) != mipmap) return std::nullopt;
  return *it->second;
}

cudaError_t array_side(const void* handle, uint64_t x, uint64_t y, uint64_t z, CopySide& side, Pitches& pitches) {
  const std::optional<ArrayInfo> a = array_info(handle, false);
  if (!a) return cudaErrorInvalidResourceHandle;
  const uint64_t row = a->shape.width * a->element_bytes;
  const uint64_t rows = a->shape.height == 0 ? 1 : a->shape.height;
  const uint64_t slices = a->shape.depth == 0 ? 1 : a->shape.depth;
  if (x >= row || y >= rows || z >= slices) return cudaErrorInvalidValue;
  side = CopySide{reinterpret_cast<const void*>((z * rows + y) * row + x), a->id, a->device, bytes_of(*a)};
  pitches = Pitches{row, row * rows};
  return cudaSuccess;
}

cudaError_t linear_copy(const LinearSide& dst, const LinearSide& src, uint64_t bytes, cudaMemcpyKind kind,
                        cudaStream_t stream, bool async, bool per_thread) {
  struct Side {
    std::optional<ArrayInfo> info;
    const std::byte* ptr = nullptr;
    uint64_t off = 0;
    uint64_t row = 0, rows = 1, slices = 1;  // an array's
  };
  Side d, s;
  for (auto [in, out] : {std::pair{&dst, &d}, std::pair{&src, &s}}) {
    out->off = in->offset;
    if (in->array == nullptr) {
      out->ptr = static_cast<const std::byte*>(in->ptr);
      continue;
    }
    out->info = array_info(in->array, false);
    if (!out->info) return cudaErrorInvalidResourceHandle;
    out->row = out->info->shape.width * out->info->element_bytes;
    out->rows = out->info->shape.height == 0 ? 1 : out->info->shape.height;
    out->slices = out->info->shape.depth == 0 ? 1 : out->info->shape.depth;
    if (in->offset > out->row * out->rows * out->slices || bytes > out->row * out->rows * out->slices - in->offset)
      return cudaErrorInvalidValue;
  }
  while (bytes > 0) {
    uint64_t width = bytes, rows = 1;
    bool whole_rows = true;
    uint64_t row_len = 0;
    for (const Side* x : {&d, &s}) {
      if (!x->info) continue;
      width = std::min(width, x->row - x->off % x->row);
      whole_rows = whole_rows && x->off % x->row == 0 && (row_len == 0 || row_len == x->row);
      row_len = x->row;
    }
    if (row_len != 0 && whole_rows && width == row_len && bytes >= 2 * row_len) {
      rows = bytes / row_len;
      for (const Side* x : {&d, &s})
        if (x->info) rows = std::min(rows, x->rows - x->off / x->row % x->rows);  // within one slice
    }
    CopySide cs[2];
    Pitches p[2];
    int i = 0;
    for (const Side* x : {&d, &s}) {
      if (x->info) {
        const uint64_t z = x->off / (x->row * x->rows), y = x->off / x->row % x->rows;
        if (cudaError_t e = array_side(x == &d ? dst.array : src.array, x->off % x->row, y, z, cs[i], p[i]);
            e != cudaSuccess)
          return e;
      } else {
        cs[i] = CopySide{x->ptr + x->off};
        p[i] = Pitches{width, width * rows};
      }
      ++i;
    }
    if (cudaError_t e = copy_sides(cs[0], p[0], cs[1], p[1], {width, rows, 1}, kind, stream, async, per_thread);
        e != cudaSuccess)
      return e;
    d.off += width * rows;
    s.off += width * rows;
    bytes -= width * rows;
  }
  return cudaSuccess;
}

cudaError_t texture_create(uint64_t* out, ipc::TexCreateCmd c, const void* resource) {
  if (out == nullptr) return cudaErrorInvalidValue;
  if (cudaError_t e = attach(); e != cudaSuccess) return e;
  int device = current_device();
  if (c.res_type <= 1) {
    const std::optional<ArrayInfo> a = array_info(resource, c.res_type == 1);
    if (!a) return cudaErrorInvalidValue;
    c.res_id = a->id;
    device = a->device;
  }
  Reply reply;
  if (cudaError_t e = to_cuda(Runtime::get().call(Opcode::TexCreate, device, 0, &c, sizeof c, &reply)); e != cudaSuccess)
    return e;
  Registry& r = reg();
  std::lock_guard lk(r.mu);
  r.textures[reply.value[0]] = TextureRecord{c, resource};
  *out = reply.value[0];
  return cudaSuccess;
}

cudaError_t texture_destroy(uint64_t handle, bool surface) {
  if (handle == 0) return cudaSuccess;  // as CUDA: destroying object 0 does nothing
  {
    Registry& r = reg();
    std::lock_guard lk(r.mu);
    auto it = r.textures.find(handle);
    if (it == r.textures.end() || (it->second.cmd.surface != 0) != surface) return cudaErrorInvalidValue;
    r.textures.erase(it);
  }
  const int device = current_device();
  const ipc::TexCmd c{handle, surface ? 1u : 0u, 0};
  return to_cuda(Runtime::get().call(Opcode::TexDestroy, device, 0, &c, sizeof c));
}

std::optional<TextureRecord> texture_record(uint64_t handle, bool surface) {
  Registry& r = reg();
  std::lock_guard lk(r.mu);
  auto it = r.textures.find(handle);
  if (it == r.textures.end() || (it->second.cmd.surface != 0) != surface) return std::nullopt;
  return it->second;
}

}  // namespace funnel::client
