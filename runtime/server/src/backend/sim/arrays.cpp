// The sim backend's arrays: host memory, rows of the array's width one after the other, slices
// after them (doc/design/arrays.md); a mipmapped array keeps one such block per level.  Texture
// and surface objects are numbers (the sim runs no kernels that could read them).
#include <vector>

#include "backend/array_shape.hpp"
#include "backend/sim/sim_backend.hpp"

namespace funnel::server::sim {

namespace {

class SimArray final : public BackendArray {
 public:
  // Levels: one block (an array) or one per level (a mipmapped array).
  std::vector<std::shared_ptr<std::vector<std::byte>>> levels;
  std::byte* data = nullptr;  // an array's (or level's) first byte
  std::shared_ptr<std::vector<std::byte>> keep;  // a level: its block
};

}  // namespace

std::byte* array_bytes_at(const CopyEndpoint& e) {
  const auto* a = static_cast<const SimArray*>(e.array);
  const ArrayShape& s = a->shape;
  return a->data + (e.z * s.rows() + e.y) * s.row_bytes() + e.x;
}

Status SimBackend::array_create(int device, const ArrayShape& shape, std::unique_ptr<BackendArray>& out) {
  if (Status st = usable(device); st != Status::Success) return st;
  auto a = std::make_unique<SimArray>();
  a->shape = shape;
  a->device = device;
  try {
    const uint32_t n = shape.levels == 0 ? 1 : shape.levels;
    for (uint32_t i = 0; i < n; ++i) {
      const ArrayShape l = shape.levels == 0 ? shape : level_shape(shape, i);
      a->levels.push_back(std::make_shared<std::vector<std::byte>>(l.row_bytes() * l.rows() * l.slices()));
    }
  } catch (const std::bad_alloc&) {
    return Status::MemoryAllocation;
  }
  if (shape.levels == 0) a->data = a->levels[0]->data();
  out = std::move(a);
  return Status::Success;
}

Status SimBackend::array_level(BackendArray& mipmap, uint32_t level, std::unique_ptr<BackendArray>& out) {
  auto& m = static_cast<SimArray&>(mipmap);
  if (level >= m.levels.size() || m.shape.levels == 0) return Status::InvalidValue;
  auto l = std::make_unique<SimArray>();
  l->shape = level_shape(m.shape, level);
  l->device = m.device;
  l->keep = m.levels[level];
  l->data = l->keep->data();
  out = std::move(l);
  return Status::Success;
}

Status SimBackend::texture_create(int device, const ipc::TexCreateCmd&, const BackendArray*, uint64_t& handle) {
  if (Status st = usable(device); st != Status::Success) return st;
  handle = next_texture_.fetch_add(1, std::memory_order_relaxed);
  return Status::Success;
}

Status SimBackend::texture_destroy(int device, uint64_t, bool) { return usable(device); }

}  // namespace funnel::server::sim
