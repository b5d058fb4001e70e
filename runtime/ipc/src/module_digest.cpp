#include "funnel/ipc/module_digest.hpp"

#include <algorithm>

#include <boost/uuid/name_generator_sha1.hpp>
#include <boost/uuid/nil_generator.hpp>

namespace funnel::ipc {

ModuleDigest module_digest(std::span<const std::byte> bytes) noexcept {
  const boost::uuids::name_generator_sha1 gen(boost::uuids::nil_uuid());
  const boost::uuids::uuid u = gen(bytes.data(), bytes.size());
  ModuleDigest d{};
  std::copy(u.begin(), u.end(), d.begin());
  return d;
}

}  // namespace funnel::ipc
