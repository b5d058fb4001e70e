#include "funnel/ipc/module_digest.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include <openssl/evp.h>

namespace funnel::ipc {

ModuleDigest module_digest(std::span<const std::byte> bytes) noexcept {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  // Fails only when OpenSSL cannot allocate its context (a few hundred bytes): no digest to
  // go on with, and none may be made up (two images would share it).
  if (EVP_Digest(bytes.data(), bytes.size(), md, &length, EVP_sha256(), nullptr) != 1 || length < 16) {
    std::fputs("funnel: OpenSSL's SHA-256 failed (out of memory?): cannot name a module\n", stderr);
    std::abort();
  }
  ModuleDigest d{};
  std::copy_n(md, d.size(), d.begin());
  return d;
}

}  // namespace funnel::ipc
