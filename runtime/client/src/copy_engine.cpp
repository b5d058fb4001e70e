#include "copy_engine.hpp"

#include <cstring>
#include <deque>
#include <initializer_list>
#include <vector>

#include "api.hpp"
#include "graphs.hpp"

namespace funnel::client {
namespace {

using ipc::CopyCmd;
using ipc::Location;
using ipc::MemSpace;
using ipc::StagingState;

constexpr uint32_t state(StagingState s) { return static_cast<uint32_t>(s); }

// One side of a copy, resolved.
struct End {
  Classified c;
  uint64_t addr = 0;      // the pointer as a number (an array: the offset in its rows and slices)
  uint64_t array_id = 0;  // an array's region (device memory to every check here)
  bool on_device() const { return c.kind == Classified::Device; }
  bool host_direct() const { return c.kind == Classified::Pinned; }
  // Where a device pointer is expected: device memory, or managed memory (the GPU's too).
  bool device_like() const { return on_device() || (c.kind == Classified::Pinned && c.managed); }
  // `offset` bytes past the pointer (a later slice).
  Location location(uint64_t offset = 0) const {
    if (array_id != 0) return {MemSpace::Array, 0, array_id, addr + offset};
    if (c.kind == Classified::Device) return {MemSpace::Device, 0, 0, addr + offset};
    return {MemSpace::Pinned, 0, c.pinned_id, addr - c.base + offset};
  }
};

// An array's side: device memory of `bytes` (its rows and slices one after the other).
End array_end(const CopySide& side) {
  End e;
  e.c.kind = Classified::Device;
  e.c.device = side.device;
  e.c.base = 0;
  e.c.size = side.array_bytes;
  e.addr = reinterpret_cast<uint64_t>(side.ptr);
  e.array_id = side.array_id;
  return e;
}

// The bytes a region spans from its first one: its last row ends at
// slice*(depth-1) + pitch*(height-1) + width.  UINT64_MAX when that overflows.
uint64_t span(Pitches p, Extent3 e) {
  uint64_t slices = 0, rows = 0, total = 0;
  if (__builtin_mul_overflow(uint64_t{p.slice}, uint64_t{e.depth - 1}, &slices) ||
      __builtin_mul_overflow(uint64_t{p.pitch}, uint64_t{e.height - 1}, &rows) ||
      __builtin_add_overflow(slices, rows, &total) || __builtin_add_overflow(total, uint64_t{e.width}, &total))
    return UINT64_MAX;
  return total;
}

// Slices that follow each other without a gap, on every side, are more rows of one 2-D
// region: one command instead of one per slice.
void fold_slices(Extent3& e, std::initializer_list<Pitches> sides) {
  if (e.depth <= 1) return;
  for (const Pitches& p : sides)
    if (p.slice != p.pitch * e.height) return;
  e.height *= e.depth;
  e.depth = 1;
}

// The bits of `value` one element of `element` bytes holds (cudaMemset takes an int, uses a byte).
uint32_t element_value(int value, uint32_t element) {
  const auto v = static_cast<uint32_t>(value);
  return element >= 4 ? v : v & ((1u << (8 * element)) - 1);
}

bool inside(const End& e, uint64_t bytes) {
  if (e.c.kind == Classified::Host) return true;
  return e.addr >= e.c.base && bytes <= e.c.size - (e.addr - e.c.base);
}

// A piece of a staged copy: `rows` rows of `width` bytes, packed in the slot.
struct Chunk {
  std::byte* host;
  uint64_t host_pitch;
  Location dev;
  uint64_t dev_pitch;
  uint64_t width;
  uint64_t rows;
};

void advance(Location& l, uint64_t by) { l.address += by; }

// Splits a 2-D region into chunks that each fit one staging slot, appended to `out`.
void add_chunks(std::vector<Chunk>& out, std::byte* host, uint64_t hpitch, Location dev, uint64_t dpitch,
                uint64_t width, uint64_t height, uint64_t slot) {
  if (width <= slot) {
    // A contiguous 1-D copy is one long row: cut it into slot-sized rows.
    if (height == 1 && width > 0) {
      for (uint64_t off = 0; off < width; off += slot) {
        Location d = dev;
        advance(d, off);
        const uint64_t w = std::min(slot, width - off);
        out.push_back({host + off, w, d, w, w, 1});
      }
      return;
    }
    const uint64_t per = std::max<uint64_t>(1, slot / width);
    for (uint64_t r = 0; r < height; r += per) {
      Location d = dev;
      advance(d, r * dpitch);
      out.push_back({host + r * hpitch, hpitch, d, dpitch, width, std::min(per, height - r)});
    }
    return;
  }
  // Rows wider than a slot: each row in slot-sized pieces.
  for (uint64_t r = 0; r < height; ++r) {
    for (uint64_t off = 0; off < width; off += slot) {
      Location d = dev;
      advance(d, r * dpitch + off);
      const uint64_t w = std::min(slot, width - off);
      out.push_back({host + r * hpitch + off, w, d, w, w, 1});
    }
  }
}

CopyCmd staged_cmd(const Chunk& c, int slot, bool to_device) {
  CopyCmd cmd{};
  Location st{MemSpace::Staging, static_cast<uint32_t>(slot), 0, 0};
  cmd.width = c.width;
  cmd.height = c.rows;
  if (to_device) {
    cmd.dst = c.dev;
    cmd.dst_pitch = c.rows > 1 ? c.dev_pitch : c.width;
    cmd.src = st;
    cmd.src_pitch = c.width;
  } else {
    cmd.dst = st;
    cmd.dst_pitch = c.width;
    cmd.src = c.dev;
    cmd.src_pitch = c.rows > 1 ? c.dev_pitch : c.width;
  }
  return cmd;
}

// Pageable host -> device: fill a slot, hand it to the server, go on with the next
// slot while the server copies this one.  Even a synchronous cudaMemcpy returns once
// the last chunk is staged, as CUDA documents for pageable H2D copies ("returns once
// the pageable buffer has been copied to the staging memory ... the DMA to final
// destination may not have completed"): the caller may reuse its buffer, and later work
// of the stream runs after the copy.  `sync` only takes the deferred error.
cudaError_t staged_h2d(Runtime& rt, const std::vector<Chunk>& chunks, const StreamRef& s, bool sync) {
  for (const Chunk& c : chunks) {
    // The previous user's H2D may still be in flight: the server frees it.
    const int slot = rt.acquire_free_staging();
    if (slot < 0) return cudaErrorDevicesUnavailable;
    std::byte* dst = rt.view().staging(static_cast<uint32_t>(slot));
    rt.copier().copy(dst, c.width, c.host, c.host_pitch, c.width, c.rows);
    rt.view().staging_state(static_cast<uint32_t>(slot)).store(state(StagingState::InFlight), std::memory_order_release);
    const CopyCmd cmd = staged_cmd(c, slot, true);
    const Status st = rt.post(Opcode::Copy, s.device, s.id, &cmd, sizeof cmd);
    rt.release_staging(slot);
    if (st != Status::Success) return to_cuda(st);
  }
  return sync ? to_cuda(rt.take_deferred()) : cudaSuccess;
}

// Device -> pageable host: several slots in flight; the oldest is drained (copied
// out) while later ones are still being filled by the server.  Only a thread that
// holds no slot blocks for one, so threads cannot starve each other.
cudaError_t staged_d2h(Runtime& rt, const std::vector<Chunk>& chunks, const StreamRef& s) {
  struct Pending {
    int slot;
    const Chunk* chunk;
  };
  std::deque<Pending> inflight;
  bool failed = false, lost = false;
  auto drain = [&] {
    Pending p = inflight.front();
    inflight.pop_front();
    const auto slot = static_cast<uint32_t>(p.slot);
    if (!rt.wait_staging(p.slot, [](uint32_t v) { return v != state(StagingState::InFlight); })) {
      lost = true;
      return;  // the server is gone; the slot stays ours (never reused)
    }
    auto& word = rt.view().staging_state(slot);
    if (word.load(std::memory_order_acquire) == state(StagingState::Ready)) {
      const std::byte* src = rt.view().staging(slot);
      const Chunk& c = *p.chunk;
      rt.copier().copy(c.host, c.host_pitch, src, c.width, c.width, c.rows);
    } else {
      failed = true;  // the server gave the slot back without data: the copy failed
    }
    word.store(state(StagingState::Free), std::memory_order_release);
    rt.release_staging(p.slot);
  };
  for (const Chunk& c : chunks) {
    int slot = -1;
    while (!lost && (slot = rt.acquire_staging(inflight.empty())) < 0) {
      if (inflight.empty()) return cudaErrorDevicesUnavailable;
      drain();
    }
    if (lost) break;
    if (!rt.wait_staging(slot, [](uint32_t v) { return v == state(StagingState::Free); })) {
      lost = true;
      break;
    }
    rt.view().staging_state(static_cast<uint32_t>(slot)).store(state(StagingState::InFlight), std::memory_order_release);
    const CopyCmd cmd = staged_cmd(c, slot, false);
    if (rt.post(Opcode::Copy, s.device, s.id, &cmd, sizeof cmd) != Status::Success) {
      lost = true;
      break;
    }
    inflight.push_back({slot, &c});
  }
  while (!lost && !inflight.empty()) drain();
  if (lost) return cudaErrorDevicesUnavailable;
  if (failed) {
    // The failure is the deferred error; a Fence makes sure it was posted.
    const Status st = rt.call(Opcode::Fence, s.device, 0, nullptr, 0);
    return st != Status::Success ? to_cuda(st) : cudaErrorInvalidValue;
  }
  return to_cuda(rt.take_deferred());
}

End resolve(Runtime& rt, const void* p, bool device_expected, bool host_expected) {
  End e;
  e.addr = reinterpret_cast<uint64_t>(p);
  e.c = rt.tables.classify(p);
  // An explicit host direction is trusted: server device addresses may coincide with
  // host addresses of this process.
  if (host_expected && e.c.kind == Classified::Device) e.c = Classified{};
  (void)device_expected;
  return e;
}

// Both ends of a copy, classified by `kind` (an explicit host side is trusted) and checked: the
// kind's device sides are device or managed memory, and each side holds its region.
cudaError_t resolve_ends(Runtime& rt, void* dst, Pitches dp, const void* src, Pitches sp, Extent3 e,
                         cudaMemcpyKind kind, End& d, End& sr) {
  const bool dst_dev = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice;
  const bool src_dev = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice;
  const bool explicit_kind = kind != cudaMemcpyDefault;
  d = resolve(rt, dst, dst_dev, explicit_kind && !dst_dev);
  sr = resolve(rt, src, src_dev, explicit_kind && !src_dev);
  if ((dst_dev && !d.device_like()) || (src_dev && !sr.device_like())) return cudaErrorInvalidValue;
  if (!inside(d, span(dp, e)) || !inside(sr, span(sp, e))) return cudaErrorInvalidValue;
  return cudaSuccess;
}

}  // namespace

cudaError_t direct_copy_command(void* dst, Pitches dp, const void* src, Pitches sp, Extent3 e, cudaMemcpyKind kind,
                                const char* call, ipc::CopyCmd& out, int& device) noexcept {
  if (kind < cudaMemcpyHostToHost || kind > cudaMemcpyDefault) return cudaErrorInvalidMemcpyDirection;
  if (e.height > 1 && (dp.pitch < e.width || sp.pitch < e.width)) return cudaErrorInvalidPitchValue;
  if (e.width == 0 || e.height == 0 || e.depth == 0 || dst == nullptr || src == nullptr) return cudaErrorInvalidValue;
  fold_slices(e, {dp, sp});
  if (e.height == 1) dp.pitch = sp.pitch = e.width;
  Runtime& rt = Runtime::get();
  if (cudaError_t err = to_cuda(rt.ready()); err != cudaSuccess) return err;
  End d, sr;
  if (cudaError_t err = resolve_ends(rt, dst, dp, src, sp, e, kind, d, sr); err != cudaSuccess) return err;
  const bool direct = (d.on_device() || d.host_direct()) && (sr.on_device() || sr.host_direct());
  if (!direct || (!d.device_like() && !sr.device_like()) || e.depth != 1) {
    const char* why = !direct ? "pageable host memory (use cudaMallocHost or cudaHostAlloc memory)"
                      : e.depth != 1 ? "3-D slices that are not one 2-D region"
                                     : "host memory on both sides";
    report_unsupported(fmt::format("{} with {}", call, why).c_str());
    return cudaErrorNotSupported;
  }
  device = d.on_device() ? d.c.device : sr.on_device() ? sr.c.device : current_device();
  out = CopyCmd{d.location(), sr.location(), e.width, e.height, dp.pitch, sp.pitch};
  return cudaSuccess;
}

cudaError_t copy_3d(void* dst, Pitches dp, const void* src, Pitches sp, Extent3 e, cudaMemcpyKind kind,
                    cudaStream_t stream, bool async, bool per_thread) noexcept {
  return copy_sides(CopySide{dst}, dp, CopySide{src}, sp, e, kind, stream, async, per_thread);
}

cudaError_t copy_sides(const CopySide& dside, Pitches dp, const CopySide& sside, Pitches sp, Extent3 e,
                       cudaMemcpyKind kind, cudaStream_t stream, bool async, bool per_thread) noexcept {
  try {
    void* dst = const_cast<void*>(dside.ptr);
    const void* src = sside.ptr;
    const bool arrays = dside.array_id != 0 || sside.array_id != 0;
    if (kind < cudaMemcpyHostToHost || kind > cudaMemcpyDefault) return cudaErrorInvalidMemcpyDirection;
    if (e.height > 1 && (dp.pitch < e.width || sp.pitch < e.width)) return cudaErrorInvalidPitchValue;
    if (e.width == 0 || e.height == 0 || e.depth == 0) return cudaSuccess;
    if (!arrays) fold_slices(e, {dp, sp});  // an array region's rows stay in their slice
    if (e.height == 1) {
      if (dside.array_id == 0) dp.pitch = e.width;
      if (sside.array_id == 0) sp.pitch = e.width;
    }
    if ((dst == nullptr && dside.array_id == 0) || (src == nullptr && sside.array_id == 0)) return cudaErrorInvalidValue;
    StreamRef s;
    if (cudaError_t err = resolve_stream(stream, per_thread, s); err != cudaSuccess) return err;
    if (s.capturing()) {
      if (!async) return capture_refuse(s);  // a synchronous copy cannot be captured
      if (arrays) return capture_refuse(s, "a copy to or from a CUDA array in a stream capture");
      return capture_copy(s, CopyParams{dst, src, dp, sp, e, kind});
    }
    Runtime& rt = Runtime::get();

    End d, sr;
    if (!arrays) {
      if (cudaError_t err = resolve_ends(rt, dst, dp, src, sp, e, kind, d, sr); err != cudaSuccess) return err;
    } else {
      // An array is a device side; the kind must agree (cudaMemcpyDefault: the other side classified).
      const bool dst_dev = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice;
      const bool src_dev = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice;
      if (kind != cudaMemcpyDefault && ((dside.array_id != 0 && !dst_dev) || (sside.array_id != 0 && !src_dev)))
        return cudaErrorInvalidMemcpyDirection;
      d = dside.array_id != 0 ? array_end(dside) : resolve(rt, dst, dst_dev, kind != cudaMemcpyDefault && !dst_dev);
      sr = sside.array_id != 0 ? array_end(sside) : resolve(rt, src, src_dev, kind != cudaMemcpyDefault && !src_dev);
      if ((dst_dev && !d.device_like()) || (src_dev && !sr.device_like())) return cudaErrorInvalidValue;
      if (!inside(d, span(dp, e)) || !inside(sr, span(sp, e))) return cudaErrorInvalidValue;
      // An array's region stays within its rows and within one slice's rows.
      for (const auto& [end, p] : {std::pair{&d, dp}, std::pair{&sr, sp}}) {
        if (end->array_id == 0) continue;
        const uint64_t x = end->addr % p.pitch, y = end->addr % p.slice / p.pitch;
        if (e.width > p.pitch - x || e.height > p.slice / p.pitch - y) return cudaErrorInvalidValue;
      }
    }

    auto* dst_bytes = static_cast<std::byte*>(dst);
    auto* src_bytes = static_cast<std::byte*>(const_cast<void*>(src));
    if (!d.on_device() && !sr.on_device()) {
      // Host to host: ordered after earlier work of the stream, then a local memcpy.
      if (Status st = rt.call(Opcode::StreamSynchronize, s.device, s.id, nullptr, 0); st != Status::Success)
        return to_cuda(st);
      for (size_t z = 0; z < e.depth; ++z)
        for (size_t r = 0; r < e.height; ++r)
          std::memmove(dst_bytes + z * dp.slice + r * dp.pitch, src_bytes + z * sp.slice + r * sp.pitch, e.width);
      return cudaSuccess;
    }
    const int device = d.on_device() ? d.c.device : sr.c.device;
    const StreamRef on{s.id, s.id == 0 ? device : s.device};
    if ((d.on_device() || d.host_direct()) && (sr.on_device() || sr.host_direct())) {
      // One command per slice; a synchronous copy waits for the last (the stream runs them in order).
      for (size_t z = 0; z < e.depth; ++z) {
        CopyCmd cmd{d.location(z * dp.slice), sr.location(z * sp.slice), e.width, e.height, dp.pitch, sp.pitch};
        const bool wait = !async && z + 1 == e.depth;
        const Status st = wait ? rt.call(Opcode::Copy, on.device, on.id, &cmd, sizeof cmd)
                               : rt.post(Opcode::Copy, on.device, on.id, &cmd, sizeof cmd);
        if (st != Status::Success) return to_cuda(st);
      }
      return cudaSuccess;
    }
    const uint64_t slot = rt.view().header().staging_slot_size;
    std::vector<Chunk> chunks;
    if (d.on_device()) {
      for (size_t z = 0; z < e.depth; ++z)
        add_chunks(chunks, src_bytes + z * sp.slice, sp.pitch, d.location(z * dp.slice), dp.pitch, e.width, e.height,
                   slot);
      return staged_h2d(rt, chunks, on, !async);
    }
    for (size_t z = 0; z < e.depth; ++z)
      add_chunks(chunks, dst_bytes + z * dp.slice, dp.pitch, sr.location(z * sp.slice), sp.pitch, e.width, e.height,
                 slot);
    return staged_d2h(rt, chunks, on);  // pageable D2H is synchronous, async or not (as CUDA)
  } catch (const std::exception& ex) {
    log_error(fmt::format("funnel: internal error in a copy: {}", ex.what()));
    return cudaErrorUnknown;
  }
}

cudaError_t memset_3d(void* dst, Pitches p, int value, Extent3 e, cudaStream_t stream, bool per_thread,
                      uint32_t element) noexcept {
  if (e.height > 1 && p.pitch < e.width) return cudaErrorInvalidPitchValue;
  if (e.width == 0 || e.height == 0 || e.depth == 0) return cudaSuccess;
  fold_slices(e, {p});
  if (e.height == 1) p.pitch = e.width;
  StreamRef s;
  if (cudaError_t err = resolve_stream(stream, per_thread, s); err != cudaSuccess) return err;
  if (s.capturing()) {
    if (e.depth != 1) return capture_refuse(s, "a 3-D memset in a stream capture");
    cudaMemsetParams mp{};
    mp.dst = dst;
    mp.pitch = p.pitch;
    mp.value = element_value(value, element);
    mp.elementSize = element;
    mp.width = e.width / element;
    mp.height = e.height;
    return capture_memset(s, mp);
  }
  Runtime& rt = Runtime::get();
  uint64_t addr = reinterpret_cast<uint64_t>(dst);
  int device = s.device;
  if (const auto alloc = rt.tables.device_range(addr, span(p, e))) {
    if (s.id == 0) device = alloc->device;
  } else {
    // Managed memory: set where the GPU sees it (the server checks it is this client's).
    End m{rt.tables.classify(dst), addr};
    if (!m.device_like() || m.on_device() || !inside(m, span(p, e))) return cudaErrorInvalidValue;
    addr = m.c.pinned_device + (addr - m.c.base);
  }
  for (size_t z = 0; z < e.depth; ++z) {
    ipc::MemsetCmd cmd{addr + z * p.slice, p.pitch, e.width, e.height, element_value(value, element), element};
    const Status st = rt.post(Opcode::Memset, device, s.id, &cmd, sizeof cmd);
    if (st != Status::Success) return to_cuda(st);
  }
  return cudaSuccess;
}

}  // namespace funnel::client
