// MPI calls with device buffers (doc/mpi.md, "Device buffers"): each buffer argument that is
// device memory of this process is copied to a pinned host buffer before the call (what the call
// reads) and back after it (what it writes), so any MPI library (CUDA-aware or not) moves host
// memory.  The copies are cudaMemcpy's: ordered after the work queued before the call on the
// legacy default stream (and so on every blocking stream and per-thread default stream), and
// before the work queued after it.  Host buffers go straight to PMPI: one look-up in funnel's
// tables per buffer.  A buffer that is neither host memory of this process nor inside a live
// allocation of it is MPI_ERR_BUFFER, raised through the communicator's error handler.
#include <cuda_runtime_api.h>
#include <mpi.h>

#include <sched.h>

#include <algorithm>
#include <cstddef>
#include <initializer_list>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "local.hpp"
#include "staging.hpp"

#define FUNNEL_MPI_API extern "C" __attribute__((visibility("default")))

using funnel::mpi::extent_of;
using funnel::mpi::Staged;

namespace {

int comm_size(MPI_Comm comm) {
  int n = 0;
  if (PMPI_Comm_test_inter(comm, &n) == MPI_SUCCESS && n != 0) {
    PMPI_Comm_remote_size(comm, &n);
    return n;
  }
  PMPI_Comm_size(comm, &n);
  return n;
}
int comm_rank(MPI_Comm comm) {
  int r = 0;
  PMPI_Comm_rank(comm, &r);
  return r;
}
bool is_inter(MPI_Comm comm) {
  int flag = 0;
  PMPI_Comm_test_inter(comm, &flag);
  return flag != 0;
}
// Whether this rank is the root of a rooted collective (intercommunicators: MPI_ROOT).
bool at_root(int root, MPI_Comm comm) { return is_inter(comm) ? root == MPI_ROOT : root == comm_rank(comm); }

// Runs `call` with the staged pointers, then copies back what it wrote (on success).
template <class Call>
int staged_call(MPI_Comm comm, std::vector<Staged>& buffers, Call&& call) {
  for (const auto& b : buffers)
    if (!b.ok()) return funnel::mpi::buffer_error(comm);
  const int rc = call();
  if (rc != MPI_SUCCESS) return rc;
  for (auto& b : buffers)
    if (!b.finish()) return funnel::mpi::buffer_error(comm);
  return rc;
}

// A non-blocking call: its staged buffers wait for the request's completion.
template <class Call>
int staged_start(MPI_Comm comm, std::vector<Staged> buffers, MPI_Request* request, Call&& call) {
  for (const auto& b : buffers)
    if (!b.ok()) return funnel::mpi::buffer_error(comm);
  const int rc = call();
  if (rc == MPI_SUCCESS && request != nullptr) funnel::mpi::keep_until_done(*request, std::move(buffers));
  return rc;
}

// Blocking (request null) or non-blocking.
template <class Call>
int staged_run(MPI_Comm comm, std::vector<Staged>& buffers, MPI_Request* request, Call&& call) {
  if (request == nullptr) return staged_call(comm, buffers, call);
  return staged_start(comm, std::move(buffers), request, call);
}

// The fast path: every buffer host memory (no staging record, no allocation).
bool all_host(std::initializer_list<std::pair<const void*, funnel::mpi::Extent>> buffers) {
  for (const auto& [buf, e] : buffers)
    if (funnel::mpi::kind_of(buf, e) != funnel::mpi::Kind::Host) return false;
  return true;
}

bool any_staged(const std::vector<Staged>& v) {
  for (const auto& b : v)
    if (b.staged() || !b.ok()) return true;
  return false;
}

namespace local = funnel::mpi::local;

int refused(MPI_Comm comm, const local::Half& h) {
  PMPI_Comm_call_errhandler(comm, h.error);
  return h.error;
}

// Under FUNNEL_MPI_LOCAL=1, a point-to-point half that goes GPU-local (`serve(h)`'s result) or is
// refused (its error, raised through the communicator); nullopt where MPI's path takes it (or the
// setting is off).
template <class Serve>
std::optional<int> local_half(bool send, const void* buf, int count, MPI_Datatype type, int peer, int tag,
                              MPI_Comm comm, const char* name, Serve&& serve) {
  if (!local::enabled()) return std::nullopt;
  local::Half h;
  switch (local::route(send, buf, count, type, peer, tag, comm, name, h)) {
    case local::Route::Local: return serve(h);
    case local::Route::Refuse: return refused(comm, h);
    case local::Route::Mpi: break;
  }
  return std::nullopt;
}

// A blocking send of (buf, count, type) to `dest` through `send` (`buffered`: MPI_Bsend's, which
// returns before its receive when GPU-local).
template <class Send>
int send_like(const void* buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm, const char* name,
              Send&& send, bool buffered = false) {
  if (const auto rc = local_half(true, buf, count, type, dest, tag, comm, name, [&](const local::Half& h) {
        return buffered ? local::bsend(h, dest, tag, comm, name)
                        : local::blocking(true, h, h.env.dest, tag, comm, MPI_STATUS_IGNORE, name);
      }))
    return *rc;
  const funnel::mpi::Extent e = extent_of(count, type);
  if (all_host({{buf, e}})) return send(buf);
  std::vector<Staged> b;
  b.emplace_back(buf, e, true, false, name);
  if (!any_staged(b)) return send(buf);
  return staged_call(comm, b, [&] { return send(b[0].ptr()); });
}

// After PMPI completed the requests of `before` (their handles as they were), index by index
// where `done(i)` says so: their staged buffers finished.
template <class Done>
int finish_requests(const std::vector<MPI_Request>& before, Done&& done) {
  int rc = MPI_SUCCESS;
  for (size_t i = 0; i < before.size(); ++i)
    if (done(i) && !funnel::mpi::complete(before[i])) rc = MPI_ERR_BUFFER;
  return rc;
}

}  // namespace

// ---- point to point ---------------------------------------------------------------------------

FUNNEL_MPI_API int MPI_Send(const void* buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm) {
  return send_like(buf, count, type, dest, tag, comm, "MPI_Send",
                   [&](const void* p) { return PMPI_Send(p, count, type, dest, tag, comm); });
}
FUNNEL_MPI_API int MPI_Ssend(const void* buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm) {
  return send_like(buf, count, type, dest, tag, comm, "MPI_Ssend",
                   [&](const void* p) { return PMPI_Ssend(p, count, type, dest, tag, comm); });
}
FUNNEL_MPI_API int MPI_Rsend(const void* buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm) {
  return send_like(buf, count, type, dest, tag, comm, "MPI_Rsend",
                   [&](const void* p) { return PMPI_Rsend(p, count, type, dest, tag, comm); });
}
// Persistent buffered sends are not GPU-local yet: under FUNNEL_MPI_LOCAL=1 one
// that would be (a device buffer to a rank of this server) is refused, as its receive would wait
// for a GPU-local message that never comes.
bool not_local_yet(bool send, const void* buf, int count, MPI_Datatype type, int peer, int tag, MPI_Comm comm,
                   const char* name, int& rc) {
  local::Half h;
  const local::Route r = local::route(send, buf, count, type, peer, tag, comm, name, h, false);
  if (r == local::Route::Mpi) return false;
  if (r == local::Route::Local)
    funnel::mpi::warn((std::string(name) + " of a device buffer to a rank of this node under FUNNEL_MPI_LOCAL=1: "
                                           "refused (MPI_ERR_OTHER): not served GPU-local yet (use MPI_Send/MPI_Isend, "
                                           "or unset FUNNEL_MPI_LOCAL)")
                          .c_str());
  h.error = MPI_ERR_OTHER;
  rc = refused(comm, h);
  return true;
}

// The message is copied into the attached buffer before MPI_Bsend returns: the host copy may go.
FUNNEL_MPI_API int MPI_Bsend(const void* buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm) {
  return send_like(
      buf, count, type, dest, tag, comm, "MPI_Bsend",
      [&](const void* p) { return PMPI_Bsend(p, count, type, dest, tag, comm); }, true);
}

FUNNEL_MPI_API int MPI_Recv(void* buf, int count, MPI_Datatype type, int source, int tag, MPI_Comm comm,
                            MPI_Status* status) {
  if (const auto rc = local_half(false, buf, count, type, source, tag, comm, "MPI_Recv", [&](const local::Half& h) {
        return local::blocking(false, h, source, tag, comm, status, "MPI_Recv");
      }))
    return *rc;
  const funnel::mpi::Extent e = extent_of(count, type);
  if (all_host({{buf, e}})) return PMPI_Recv(buf, count, type, source, tag, comm, status);
  std::vector<Staged> b;
  b.emplace_back(buf, e, false, true, "MPI_Recv");
  if (!any_staged(b)) return PMPI_Recv(buf, count, type, source, tag, comm, status);
  return staged_call(comm, b, [&] { return PMPI_Recv(b[0].ptr(), count, type, source, tag, comm, status); });
}

FUNNEL_MPI_API int MPI_Sendrecv(const void* sendbuf, int sendcount, MPI_Datatype sendtype, int dest, int sendtag,
                                void* recvbuf, int recvcount, MPI_Datatype recvtype, int source, int recvtag,
                                MPI_Comm comm, MPI_Status* status) {
  const funnel::mpi::Extent se = extent_of(sendcount, sendtype), re = extent_of(recvcount, recvtype);
  if (local::enabled()) {
    // Either half GPU-local: the receive and the send as non-blocking halves, waited for together.
    local::Half hs, hr;
    const local::Route rs = local::route(true, sendbuf, sendcount, sendtype, dest, sendtag, comm, "MPI_Sendrecv", hs);
    if (rs == local::Route::Refuse) return refused(comm, hs);
    const local::Route rr = local::route(false, recvbuf, recvcount, recvtype, source, recvtag, comm, "MPI_Sendrecv", hr);
    if (rr == local::Route::Refuse) return refused(comm, hr);
    if (rs == local::Route::Local || rr == local::Route::Local) {
      MPI_Request req[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
      MPI_Status st[2];
      int rc = rr == local::Route::Local ? local::start(false, hr, source, recvtag, comm, &req[0], "MPI_Sendrecv")
                                         : MPI_Irecv(recvbuf, recvcount, recvtype, source, recvtag, comm, &req[0]);
      if (rc == MPI_SUCCESS)
        rc = rs == local::Route::Local ? local::start(true, hs, dest, sendtag, comm, &req[1], "MPI_Sendrecv")
                                       : MPI_Isend(sendbuf, sendcount, sendtype, dest, sendtag, comm, &req[1]);
      if (rc != MPI_SUCCESS) return rc;
      rc = MPI_Waitall(2, req, st);
      if (status != MPI_STATUS_IGNORE) *status = st[0];
      return rc == MPI_ERR_IN_STATUS ? (st[0].MPI_ERROR != MPI_SUCCESS ? st[0].MPI_ERROR : st[1].MPI_ERROR) : rc;
    }
  }
  if (all_host({{sendbuf, se}, {recvbuf, re}}))
    return PMPI_Sendrecv(sendbuf, sendcount, sendtype, dest, sendtag, recvbuf, recvcount, recvtype, source, recvtag,
                         comm, status);
  std::vector<Staged> b;
  b.emplace_back(sendbuf, se, true, false, "MPI_Sendrecv");
  b.emplace_back(recvbuf, re, false, true, "MPI_Sendrecv");
  if (!any_staged(b))
    return PMPI_Sendrecv(sendbuf, sendcount, sendtype, dest, sendtag, recvbuf, recvcount, recvtype, source, recvtag,
                         comm, status);
  return staged_call(comm, b, [&] {
    return PMPI_Sendrecv(b[0].ptr(), sendcount, sendtype, dest, sendtag, b[1].ptr(), recvcount, recvtype, source,
                         recvtag, comm, status);
  });
}

FUNNEL_MPI_API int MPI_Sendrecv_replace(void* buf, int count, MPI_Datatype type, int dest, int sendtag, int source,
                                        int recvtag, MPI_Comm comm, MPI_Status* status) {
  if (local::enabled()) {
    // Either half GPU-local: the message to send is copied to a device buffer of its own first
    // (cudaMemcpy on the legacy stream: after the work queued before the call), then sent from
    // there while the receive lands in `buf`, as MPI_Sendrecv.
    local::Half hs, hr;
    const local::Route rs = local::route(true, buf, count, type, dest, sendtag, comm, "MPI_Sendrecv_replace", hs, false);
    const local::Route rr =
        local::route(false, buf, count, type, source, recvtag, comm, "MPI_Sendrecv_replace", hr, false);
    if (rs == local::Route::Refuse) return refused(comm, hs);
    if (rr == local::Route::Refuse) return refused(comm, hr);
    if (rs == local::Route::Local || rr == local::Route::Local) {
      const funnel::mpi::Extent e = extent_of(count, type);
      void* copy = nullptr;
      if (e.bytes != 0 && (cudaMalloc(&copy, e.bytes) != cudaSuccess ||
                           cudaMemcpy(copy, static_cast<std::byte*>(buf) + e.offset, e.bytes,
                                      cudaMemcpyDeviceToDevice) != cudaSuccess)) {
        if (copy != nullptr) cudaFree(copy);
        return funnel::mpi::buffer_error(comm);
      }
      const void* from = e.bytes == 0 ? buf : static_cast<const std::byte*>(copy) - e.offset;
      const int rc = MPI_Sendrecv(from, count, type, dest, sendtag, buf, count, type, source, recvtag, comm, status);
      if (copy != nullptr) cudaFree(copy);
      return rc;
    }
  }
  std::vector<Staged> b;
  b.emplace_back(buf, extent_of(count, type), true, true, "MPI_Sendrecv_replace");
  if (!any_staged(b)) return PMPI_Sendrecv_replace(buf, count, type, dest, sendtag, source, recvtag, comm, status);
  return staged_call(comm, b, [&] {
    return PMPI_Sendrecv_replace(b[0].ptr(), count, type, dest, sendtag, source, recvtag, comm, status);
  });
}

// Non-blocking: a send's host copy is made now and kept until the request completes; a receive
// lands in a host copy that goes to the device when the request completes (MPI_Wait/Test*).
// (`buffered`: MPI_Ibsend's, complete at once when GPU-local.)
template <class Start>
int isend_like(const void* buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm, MPI_Request* request,
               const char* name, Start&& start, bool buffered = false) {
  if (const auto rc = local_half(true, buf, count, type, dest, tag, comm, name, [&](const local::Half& h) {
        return buffered ? local::ibsend(h, dest, tag, comm, request, name)
                        : local::start(true, h, dest, tag, comm, request, name);
      }))
    return *rc;
  const funnel::mpi::Extent e = extent_of(count, type);
  if (all_host({{buf, e}})) return start(buf);
  std::vector<Staged> b;
  b.emplace_back(buf, e, true, false, name);
  if (!any_staged(b)) return start(buf);
  const void* p = b[0].ptr();
  return staged_start(comm, std::move(b), request, [&] { return start(p); });
}

FUNNEL_MPI_API int MPI_Isend(const void* buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm,
                             MPI_Request* request) {
  return isend_like(buf, count, type, dest, tag, comm, request, "MPI_Isend",
                    [&](const void* p) { return PMPI_Isend(p, count, type, dest, tag, comm, request); });
}
FUNNEL_MPI_API int MPI_Issend(const void* buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm,
                              MPI_Request* request) {
  return isend_like(buf, count, type, dest, tag, comm, request, "MPI_Issend",
                    [&](const void* p) { return PMPI_Issend(p, count, type, dest, tag, comm, request); });
}
FUNNEL_MPI_API int MPI_Irsend(const void* buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm,
                              MPI_Request* request) {
  return isend_like(buf, count, type, dest, tag, comm, request, "MPI_Irsend",
                    [&](const void* p) { return PMPI_Irsend(p, count, type, dest, tag, comm, request); });
}
FUNNEL_MPI_API int MPI_Ibsend(const void* buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm,
                              MPI_Request* request) {
  return isend_like(
      buf, count, type, dest, tag, comm, request, "MPI_Ibsend",
      [&](const void* p) { return PMPI_Ibsend(p, count, type, dest, tag, comm, request); }, true);
}

FUNNEL_MPI_API int MPI_Irecv(void* buf, int count, MPI_Datatype type, int source, int tag, MPI_Comm comm,
                             MPI_Request* request) {
  if (const auto rc = local_half(false, buf, count, type, source, tag, comm, "MPI_Irecv", [&](const local::Half& h) {
        return local::start(false, h, source, tag, comm, request, "MPI_Irecv");
      }))
    return *rc;
  const funnel::mpi::Extent e = extent_of(count, type);
  if (all_host({{buf, e}})) return PMPI_Irecv(buf, count, type, source, tag, comm, request);
  std::vector<Staged> b;
  b.emplace_back(buf, e, false, true, "MPI_Irecv");
  if (!any_staged(b)) return PMPI_Irecv(buf, count, type, source, tag, comm, request);
  void* p = b[0].ptr();
  return staged_start(comm, std::move(b), request,
                      [&] { return PMPI_Irecv(p, count, type, source, tag, comm, request); });
}

// ---- completion ---------------------------------------------------------------------------------
// With no staged request and no GPU-local one outstanding these are PMPI's own calls.  A
// GPU-local request (a generalized request, local.hpp) is completed here when its message ended:
// the waits wait for that first (letting MPI progress meanwhile), the tests look first.

// Persistent GPU-local requests whose half has not ended are kept from MPI (their placeholder
// would complete at once): `call` gets the requests with MPI_REQUEST_NULL in their place, and
// what MPI changed is copied back; `left` says whether any was kept back.
template <class Call>
int with_hidden(int n, MPI_Request* requests, bool& left, Call&& call) {
  const std::vector<int> hide = local::hidden(requests, n);
  left = !hide.empty();
  if (hide.empty()) return call(requests);
  std::vector<MPI_Request> v(requests, requests + n);
  for (int i : hide) v[static_cast<size_t>(i)] = MPI_REQUEST_NULL;
  const int rc = call(v.data());
  for (int i = 0; i < n; ++i)
    if (std::find(hide.begin(), hide.end(), i) == hide.end()) requests[i] = v[static_cast<size_t>(i)];
  return rc;
}
// MPI_Test, MPI_Testall: not done while a persistent GPU-local one among them waits.
template <class Call>
int test_hiding(MPI_Request* requests, int n, int* flag, Call&& call) {
  if (!local::hidden(requests, n).empty()) {
    *flag = 0;
    local::progress();
    return MPI_SUCCESS;
  }
  return call();
}

// The completion calls with GPU-local requests outstanding: each waits for (or polls) them, then
// runs `call`, then raises a failed one's error through its communicator (local::raise_failed).
// `done(before)` lists the handles `call` completed, matching the statuses' order.
template <class Call, class Done>
int with_local(MPI_Request* requests, int n, MPI_Status* statuses, bool many, bool wait, Call&& call, Done&& done) {
  if (wait && local::outstanding(requests, n)) local::settle(requests, n);
  else local::poll(requests, n);
  const std::vector<MPI_Request> before(requests, requests + n);
  const int rc = call();
  if (rc != MPI_SUCCESS && rc != MPI_ERR_IN_STATUS) return rc;
  const std::vector<MPI_Request> completed = done(before);
  const int e = local::raise_failed(completed.data(), static_cast<int>(completed.size()), statuses, many);
  return e != MPI_SUCCESS ? e : rc;
}
std::vector<MPI_Request> all_of(const std::vector<MPI_Request>& before) { return before; }

int wait_one(MPI_Request* request, MPI_Status* status) {
  if (!funnel::mpi::any_pending() || request == nullptr) return PMPI_Wait(request, status);
  const MPI_Request before = *request;
  const int rc = PMPI_Wait(request, status);
  if (rc == MPI_SUCCESS && !funnel::mpi::complete(before)) return MPI_ERR_BUFFER;
  return rc;
}
FUNNEL_MPI_API int MPI_Wait(MPI_Request* request, MPI_Status* status) {
  if (request != nullptr && local::busy())
    return with_local(request, 1, status, false, true, [&] { return wait_one(request, status); }, all_of);
  return wait_one(request, status);
}

int test_one(MPI_Request* request, int* flag, MPI_Status* status) {
  if (!funnel::mpi::any_pending() || request == nullptr) return PMPI_Test(request, flag, status);
  const MPI_Request before = *request;
  const int rc = PMPI_Test(request, flag, status);
  if (rc == MPI_SUCCESS && flag != nullptr && *flag != 0 && !funnel::mpi::complete(before)) return MPI_ERR_BUFFER;
  return rc;
}
FUNNEL_MPI_API int MPI_Test(MPI_Request* request, int* flag, MPI_Status* status) {
  if (request != nullptr && flag != nullptr && local::busy())
    return with_local(request, 1, status, false, false, [&] { return test_hiding(request, 1, flag, [&] { return test_one(request, flag, status); }); },
                      [&](const std::vector<MPI_Request>& b) { return *flag != 0 ? b : std::vector<MPI_Request>{}; });
  return test_one(request, flag, status);
}

int wait_all(int count, MPI_Request requests[], MPI_Status statuses[]) {
  if (!funnel::mpi::any_pending() || count <= 0) return PMPI_Waitall(count, requests, statuses);
  const std::vector<MPI_Request> before(requests, requests + count);
  const int rc = PMPI_Waitall(count, requests, statuses);
  if (rc != MPI_SUCCESS) return rc;  // MPI_ERR_IN_STATUS: which completed is in the statuses
  return finish_requests(before, [](size_t) { return true; });
}
FUNNEL_MPI_API int MPI_Waitall(int count, MPI_Request requests[], MPI_Status statuses[]) {
  if (count > 0 && local::busy())
    return with_local(requests, count, statuses, true, true, [&] { return wait_all(count, requests, statuses); },
                      all_of);
  return wait_all(count, requests, statuses);
}

int test_all(int count, MPI_Request requests[], int* flag, MPI_Status statuses[]) {
  if (!funnel::mpi::any_pending() || count <= 0) return PMPI_Testall(count, requests, flag, statuses);
  const std::vector<MPI_Request> before(requests, requests + count);
  const int rc = PMPI_Testall(count, requests, flag, statuses);
  if (rc != MPI_SUCCESS || flag == nullptr || *flag == 0) return rc;
  return finish_requests(before, [](size_t) { return true; });
}
FUNNEL_MPI_API int MPI_Testall(int count, MPI_Request requests[], int* flag, MPI_Status statuses[]) {
  if (count > 0 && flag != nullptr && local::busy())
    return with_local(requests, count, statuses, true, false,
                      [&] { return test_hiding(requests, count, flag, [&] { return test_all(count, requests, flag, statuses); }); },
                      [&](const std::vector<MPI_Request>& b) { return *flag != 0 ? b : std::vector<MPI_Request>{}; });
  return test_all(count, requests, flag, statuses);
}

// Waits for any of several requests, some of them GPU-local: tests (which completes those that
// ended and lets MPI progress) until one is done.
template <class Test>
int wait_by_testing(Test&& test) {
  for (unsigned spin = 0;; ++spin) {
    int done = 0;
    if (const int rc = test(done); rc != MPI_SUCCESS || done != 0) return rc;
    if (spin > 64) sched_yield();
  }
}

int test_any(int count, MPI_Request requests[], int* index, int* flag, MPI_Status* status) {
  if (!funnel::mpi::any_pending() || count <= 0) return PMPI_Testany(count, requests, index, flag, status);
  const std::vector<MPI_Request> before(requests, requests + count);
  const int rc = PMPI_Testany(count, requests, index, flag, status);
  if (rc != MPI_SUCCESS || flag == nullptr || *flag == 0 || index == nullptr || *index == MPI_UNDEFINED) return rc;
  return finish_requests(before, [&](size_t i) { return static_cast<int>(i) == *index; });
}
std::vector<MPI_Request> the_one(const std::vector<MPI_Request>& before, int flag, int index) {
  if (flag == 0 || index < 0 || static_cast<size_t>(index) >= before.size()) return {};
  return {before[static_cast<size_t>(index)]};
}
FUNNEL_MPI_API int MPI_Testany(int count, MPI_Request requests[], int* index, int* flag, MPI_Status* status) {
  if (count > 0 && index != nullptr && flag != nullptr && local::busy())
    return with_local(requests, count, status, false, false,
                      [&] {
                        bool left = false;
                        const int rc = with_hidden(count, requests, left, [&](MPI_Request* r) {
                          return test_any(count, r, index, flag, status);
                        });
                        if (left && *flag != 0 && *index == MPI_UNDEFINED) *flag = 0;  // the hidden ones wait
                        return rc;
                      },
                      [&](const std::vector<MPI_Request>& b) { return the_one(b, *flag, *index); });
  return test_any(count, requests, index, flag, status);
}

FUNNEL_MPI_API int MPI_Waitany(int count, MPI_Request requests[], int* index, MPI_Status* status) {
  if (count > 0 && index != nullptr && local::outstanding(requests, count))
    return wait_by_testing([&](int& done) { return MPI_Testany(count, requests, index, &done, status); });
  if ((!funnel::mpi::any_pending() && !local::busy()) || count <= 0)
    return PMPI_Waitany(count, requests, index, status);
  const std::vector<MPI_Request> before(requests, requests + count);
  const int rc = PMPI_Waitany(count, requests, index, status);
  if (rc != MPI_SUCCESS || index == nullptr || *index == MPI_UNDEFINED) return rc;
  const int e = local::raise_failed(&before[static_cast<size_t>(*index)], 1, status, false);
  if (e != MPI_SUCCESS) return e;
  return finish_requests(before, [&](size_t i) { return static_cast<int>(i) == *index; });
}

template <class Some>
int some_like(int incount, MPI_Request requests[], int* outcount, int indices[], MPI_Status statuses[], Some&& some) {
  const std::vector<MPI_Request> before(requests, requests + incount);
  const int rc = some();
  if ((rc != MPI_SUCCESS && rc != MPI_ERR_IN_STATUS) || outcount == nullptr || *outcount == MPI_UNDEFINED) return rc;
  std::vector<bool> done(static_cast<size_t>(incount), false);
  std::vector<MPI_Request> completed;
  for (int k = 0; k < *outcount; ++k)
    if (indices[k] >= 0 && indices[k] < incount) {
      done[static_cast<size_t>(indices[k])] = true;
      completed.push_back(before[static_cast<size_t>(indices[k])]);
    } else {
      completed.push_back(MPI_REQUEST_NULL);
    }
  const int e = local::raise_failed(completed.data(), static_cast<int>(completed.size()), statuses, true);
  if (rc != MPI_SUCCESS) return rc;
  const int f = finish_requests(before, [&](size_t i) { return static_cast<bool>(done[i]); });
  return e != MPI_SUCCESS ? e : f;
}

FUNNEL_MPI_API int MPI_Waitsome(int incount, MPI_Request requests[], int* outcount, int indices[],
                                MPI_Status statuses[]) {
  if (incount > 0 && outcount != nullptr && local::outstanding(requests, incount))
    return wait_by_testing([&](int& done) {
      const int rc = MPI_Testsome(incount, requests, outcount, indices, statuses);
      done = *outcount != 0;
      return rc;
    });
  if (!funnel::mpi::any_pending() && !local::busy()) return PMPI_Waitsome(incount, requests, outcount, indices, statuses);
  return some_like(incount, requests, outcount, indices, statuses,
                   [&] { return PMPI_Waitsome(incount, requests, outcount, indices, statuses); });
}

FUNNEL_MPI_API int MPI_Testsome(int incount, MPI_Request requests[], int* outcount, int indices[],
                                MPI_Status statuses[]) {
  if (incount > 0) local::poll(requests, incount);
  if (!funnel::mpi::any_pending() && !local::busy()) return PMPI_Testsome(incount, requests, outcount, indices, statuses);
  return some_like(incount, requests, outcount, indices, statuses, [&] {
    bool left = false;
    const int rc = with_hidden(incount, requests, left, [&](MPI_Request* r) {
      return PMPI_Testsome(incount, r, outcount, indices, statuses);
    });
    if (left && outcount != nullptr && *outcount == MPI_UNDEFINED) *outcount = 0;  // the hidden ones wait
    return rc;
  });
}

// ---- collectives ------------------------------------------------------------------------------
// MPI_IN_PLACE is never staged (the other buffer is then read and written); arguments a rank's
// role makes insignificant (a non-root's receive buffer of MPI_Gather, ...) are not looked at.

template <class Call>
int bcast_like(void* buf, int count, MPI_Datatype type, int root, MPI_Comm comm, const char* name, Call&& call,
               MPI_Request* request = nullptr) {
  std::vector<Staged> b;
  const bool root_here = at_root(root, comm);
  if (root != MPI_PROC_NULL) b.emplace_back(buf, extent_of(count, type), root_here, !root_here, name);
  if (!any_staged(b)) return call(buf);
  void* p = b[0].ptr();
  return staged_run(comm, b, request, [&] { return call(p); });
}

FUNNEL_MPI_API int MPI_Bcast(void* buf, int count, MPI_Datatype type, int root, MPI_Comm comm) {
  return bcast_like(buf, count, type, root, comm, "MPI_Bcast",
                    [&](void* p) { return PMPI_Bcast(p, count, type, root, comm); });
}

// Allreduce, Reduce, Scan, Exscan and the like: sendbuf read (unless in place), recvbuf written
// (and read when in place).
template <class Call>
int reduce_like(const void* sendbuf, void* recvbuf, int count, MPI_Datatype type, MPI_Comm comm, bool recv_here,
                const char* name, Call&& call, MPI_Request* request = nullptr) {
  std::vector<Staged> b;
  const bool in_place = sendbuf == MPI_IN_PLACE;
  b.emplace_back(in_place ? MPI_IN_PLACE : sendbuf, in_place ? funnel::mpi::Extent{} : extent_of(count, type), true,
                 false, name);
  if (recv_here) b.emplace_back(recvbuf, extent_of(count, type), in_place, true, name);
  if (!any_staged(b)) return call(sendbuf, recvbuf);
  const void* s = in_place ? MPI_IN_PLACE : b[0].ptr();
  void* r = recv_here ? b[1].ptr() : recvbuf;
  return staged_run(comm, b, request, [&] { return call(s, r); });
}

FUNNEL_MPI_API int MPI_Allreduce(const void* sendbuf, void* recvbuf, int count, MPI_Datatype type, MPI_Op op,
                                 MPI_Comm comm) {
  return reduce_like(sendbuf, recvbuf, count, type, comm, true, "MPI_Allreduce", [&](const void* s, void* r) {
    return PMPI_Allreduce(s, r, count, type, op, comm);
  });
}
FUNNEL_MPI_API int MPI_Reduce(const void* sendbuf, void* recvbuf, int count, MPI_Datatype type, MPI_Op op, int root,
                              MPI_Comm comm) {
  return reduce_like(sendbuf, recvbuf, count, type, comm, at_root(root, comm), "MPI_Reduce",
                     [&](const void* s, void* r) { return PMPI_Reduce(s, r, count, type, op, root, comm); });
}
FUNNEL_MPI_API int MPI_Scan(const void* sendbuf, void* recvbuf, int count, MPI_Datatype type, MPI_Op op,
                            MPI_Comm comm) {
  return reduce_like(sendbuf, recvbuf, count, type, comm, true, "MPI_Scan",
                     [&](const void* s, void* r) { return PMPI_Scan(s, r, count, type, op, comm); });
}
FUNNEL_MPI_API int MPI_Exscan(const void* sendbuf, void* recvbuf, int count, MPI_Datatype type, MPI_Op op,
                              MPI_Comm comm) {
  return reduce_like(sendbuf, recvbuf, count, type, comm, true, "MPI_Exscan",
                     [&](const void* s, void* r) { return PMPI_Exscan(s, r, count, type, op, comm); });
}

// The collectives with a send and a receive buffer of their own shapes.  `send`/`recv`: the
// extents each covers at this rank (empty: not significant here); in place: the receive buffer
// is read too.
template <class Call>
int two_buffers(const void* sendbuf, funnel::mpi::Extent send, void* recvbuf, funnel::mpi::Extent recv, MPI_Comm comm,
                const char* name, Call&& call, MPI_Request* request = nullptr) {
  std::vector<Staged> b;
  const bool in_place = sendbuf == MPI_IN_PLACE;
  b.emplace_back(sendbuf, in_place ? funnel::mpi::Extent{} : send, true, false, name);
  b.emplace_back(recvbuf, recv, in_place, true, name);
  if (!any_staged(b)) return call(sendbuf, recvbuf);
  const void* s = in_place ? MPI_IN_PLACE : b[0].ptr();
  void* r = b[1].ptr();
  return staged_run(comm, b, request, [&] { return call(s, r); });
}

FUNNEL_MPI_API int MPI_Allgather(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf,
                                 int recvcount, MPI_Datatype recvtype, MPI_Comm comm) {
  const int n = comm_size(comm);
  return two_buffers(sendbuf, extent_of(sendcount, sendtype), recvbuf,
                     extent_of(recvcount * n, recvtype), comm, "MPI_Allgather", [&](const void* s, void* r) {
                       return PMPI_Allgather(s, sendcount, sendtype, r, recvcount, recvtype, comm);
                     });
}

FUNNEL_MPI_API int MPI_Allgatherv(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf,
                                  const int recvcounts[], const int displs[], MPI_Datatype recvtype, MPI_Comm comm) {
  return two_buffers(sendbuf, extent_of(sendcount, sendtype), recvbuf,
                     extent_of(recvcounts, displs, comm_size(comm), recvtype), comm, "MPI_Allgatherv",
                     [&](const void* s, void* r) {
                       return PMPI_Allgatherv(s, sendcount, sendtype, r, recvcounts, displs, recvtype, comm);
                     });
}

FUNNEL_MPI_API int MPI_Alltoall(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf,
                                int recvcount, MPI_Datatype recvtype, MPI_Comm comm) {
  const int n = comm_size(comm);
  return two_buffers(sendbuf, extent_of(sendcount * n, sendtype), recvbuf, extent_of(recvcount * n, recvtype), comm,
                     "MPI_Alltoall", [&](const void* s, void* r) {
                       return PMPI_Alltoall(s, sendcount, sendtype, r, recvcount, recvtype, comm);
                     });
}

FUNNEL_MPI_API int MPI_Alltoallv(const void* sendbuf, const int sendcounts[], const int sdispls[],
                                 MPI_Datatype sendtype, void* recvbuf, const int recvcounts[], const int rdispls[],
                                 MPI_Datatype recvtype, MPI_Comm comm) {
  const int n = comm_size(comm);
  const bool in_place = sendbuf == MPI_IN_PLACE;
  return two_buffers(sendbuf, in_place ? funnel::mpi::Extent{} : extent_of(sendcounts, sdispls, n, sendtype), recvbuf,
                     extent_of(recvcounts, rdispls, n, recvtype), comm, "MPI_Alltoallv", [&](const void* s, void* r) {
                       return PMPI_Alltoallv(s, sendcounts, sdispls, sendtype, r, recvcounts, rdispls, recvtype, comm);
                     });
}

FUNNEL_MPI_API int MPI_Gather(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf, int recvcount,
                              MPI_Datatype recvtype, int root, MPI_Comm comm) {
  const bool here = at_root(root, comm);
  return two_buffers(sendbuf, extent_of(sendcount, sendtype), recvbuf,
                     here ? extent_of(recvcount * comm_size(comm), recvtype) : funnel::mpi::Extent{}, comm,
                     "MPI_Gather", [&](const void* s, void* r) {
                       return PMPI_Gather(s, sendcount, sendtype, r, recvcount, recvtype, root, comm);
                     });
}

FUNNEL_MPI_API int MPI_Gatherv(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf,
                               const int recvcounts[], const int displs[], MPI_Datatype recvtype, int root,
                               MPI_Comm comm) {
  const bool here = at_root(root, comm);
  return two_buffers(sendbuf, extent_of(sendcount, sendtype), recvbuf,
                     here ? extent_of(recvcounts, displs, comm_size(comm), recvtype) : funnel::mpi::Extent{}, comm,
                     "MPI_Gatherv", [&](const void* s, void* r) {
                       return PMPI_Gatherv(s, sendcount, sendtype, r, recvcounts, displs, recvtype, root, comm);
                     });
}

// Scatter: the root's send buffer is read; in place, the root's receive buffer is not used.  An
// argument that is not significant gets an empty extent: it goes to PMPI as it is.
namespace {
struct Sides {
  funnel::mpi::Extent send, recv;
};
Sides scatter_sides(funnel::mpi::Extent root_send, const void* recvbuf, int recvcount, MPI_Datatype recvtype, int root,
                    MPI_Comm comm) {
  return {at_root(root, comm) ? root_send : funnel::mpi::Extent{},
          recvbuf == MPI_IN_PLACE ? funnel::mpi::Extent{} : extent_of(recvcount, recvtype)};
}
}  // namespace

FUNNEL_MPI_API int MPI_Scatter(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf,
                               int recvcount, MPI_Datatype recvtype, int root, MPI_Comm comm) {
  const Sides x = scatter_sides(extent_of(sendcount * comm_size(comm), sendtype), recvbuf, recvcount, recvtype, root, comm);
  return two_buffers(sendbuf, x.send, recvbuf, x.recv, comm, "MPI_Scatter", [&](const void* s, void* r) {
    return PMPI_Scatter(s, sendcount, sendtype, r, recvcount, recvtype, root, comm);
  });
}

FUNNEL_MPI_API int MPI_Scatterv(const void* sendbuf, const int sendcounts[], const int displs[],
                                MPI_Datatype sendtype, void* recvbuf, int recvcount, MPI_Datatype recvtype, int root,
                                MPI_Comm comm) {
  const Sides x = scatter_sides(extent_of(sendcounts, displs, comm_size(comm), sendtype), recvbuf, recvcount, recvtype,
                                root, comm);
  return two_buffers(sendbuf, x.send, recvbuf, x.recv, comm, "MPI_Scatterv", [&](const void* s, void* r) {
    return PMPI_Scatterv(s, sendcounts, displs, sendtype, r, recvcount, recvtype, root, comm);
  });
}

// Reduce-scatter: the input is the whole of all ranks' blocks (in place: in recvbuf), the output
// this rank's block.
namespace {
Sides reduce_scatter_sides(const void* sendbuf, int total, int mine, MPI_Datatype type) {
  return {extent_of(total, type), extent_of(sendbuf == MPI_IN_PLACE ? total : mine, type)};
}
int sum_of(const int* counts, int n) {
  long total = 0;
  for (int i = 0; i < n; ++i) total += counts[i];
  return static_cast<int>(total);
}
}  // namespace

FUNNEL_MPI_API int MPI_Reduce_scatter_block(const void* sendbuf, void* recvbuf, int recvcount, MPI_Datatype type,
                                            MPI_Op op, MPI_Comm comm) {
  const Sides x = reduce_scatter_sides(sendbuf, recvcount * comm_size(comm), recvcount, type);
  return two_buffers(sendbuf, x.send, recvbuf, x.recv, comm, "MPI_Reduce_scatter_block",
                     [&](const void* s, void* r) { return PMPI_Reduce_scatter_block(s, r, recvcount, type, op, comm); });
}

FUNNEL_MPI_API int MPI_Reduce_scatter(const void* sendbuf, void* recvbuf, const int recvcounts[], MPI_Datatype type,
                                      MPI_Op op, MPI_Comm comm) {
  const Sides x =
      reduce_scatter_sides(sendbuf, sum_of(recvcounts, comm_size(comm)), recvcounts[comm_rank(comm)], type);
  return two_buffers(sendbuf, x.send, recvbuf, x.recv, comm, "MPI_Reduce_scatter",
                     [&](const void* s, void* r) { return PMPI_Reduce_scatter(s, r, recvcounts, type, op, comm); });
}

// ---- non-blocking collectives: staged as the blocking ones, finished when the request completes

FUNNEL_MPI_API int MPI_Ibcast(void* buf, int count, MPI_Datatype type, int root, MPI_Comm comm, MPI_Request* request) {
  return bcast_like(
      buf, count, type, root, comm, "MPI_Ibcast",
      [&](void* p) { return PMPI_Ibcast(p, count, type, root, comm, request); }, request);
}

FUNNEL_MPI_API int MPI_Iallreduce(const void* sendbuf, void* recvbuf, int count, MPI_Datatype type, MPI_Op op,
                                  MPI_Comm comm, MPI_Request* request) {
  return reduce_like(
      sendbuf, recvbuf, count, type, comm, true, "MPI_Iallreduce",
      [&](const void* s, void* r) { return PMPI_Iallreduce(s, r, count, type, op, comm, request); }, request);
}

FUNNEL_MPI_API int MPI_Ireduce(const void* sendbuf, void* recvbuf, int count, MPI_Datatype type, MPI_Op op, int root,
                               MPI_Comm comm, MPI_Request* request) {
  return reduce_like(
      sendbuf, recvbuf, count, type, comm, at_root(root, comm), "MPI_Ireduce",
      [&](const void* s, void* r) { return PMPI_Ireduce(s, r, count, type, op, root, comm, request); }, request);
}

FUNNEL_MPI_API int MPI_Iallgather(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf,
                                  int recvcount, MPI_Datatype recvtype, MPI_Comm comm, MPI_Request* request) {
  const int n = comm_size(comm);
  return two_buffers(
      sendbuf, extent_of(sendcount, sendtype), recvbuf, extent_of(recvcount * n, recvtype), comm, "MPI_Iallgather",
      [&](const void* s, void* r) { return PMPI_Iallgather(s, sendcount, sendtype, r, recvcount, recvtype, comm, request); },
      request);
}

FUNNEL_MPI_API int MPI_Ialltoall(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf,
                                 int recvcount, MPI_Datatype recvtype, MPI_Comm comm, MPI_Request* request) {
  const int n = comm_size(comm);
  return two_buffers(
      sendbuf, extent_of(sendcount * n, sendtype), recvbuf, extent_of(recvcount * n, recvtype), comm, "MPI_Ialltoall",
      [&](const void* s, void* r) { return PMPI_Ialltoall(s, sendcount, sendtype, r, recvcount, recvtype, comm, request); },
      request);
}

// ---- persistent requests: the host copy is bound at init and refilled at each start -------------

template <class Init>
int persistent_like(const void* buf, int count, MPI_Datatype type, int peer, int tag, MPI_Comm comm,
                    MPI_Request* request, bool send, const char* name, Init&& init) {
  if (int rc = 0; local::enabled() && local::persistent_init(send, buf, count, type, peer, tag, comm, request, name, rc))
    return rc;
  Staged b(buf, extent_of(count, type), send, !send, name);
  if (!b.ok()) return funnel::mpi::buffer_error(comm);
  if (!b.staged()) return init(const_cast<void*>(buf));
  const int rc = init(b.ptr());
  if (rc == MPI_SUCCESS && request != nullptr) funnel::mpi::keep_persistent(*request, std::move(b), send);
  return rc;
}

FUNNEL_MPI_API int MPI_Send_init(const void* buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm,
                                 MPI_Request* request) {
  return persistent_like(buf, count, type, dest, tag, comm, request, true, "MPI_Send_init",
                         [&](void* p) { return PMPI_Send_init(p, count, type, dest, tag, comm, request); });
}
FUNNEL_MPI_API int MPI_Ssend_init(const void* buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm,
                                  MPI_Request* request) {
  return persistent_like(buf, count, type, dest, tag, comm, request, true, "MPI_Ssend_init",
                         [&](void* p) { return PMPI_Ssend_init(p, count, type, dest, tag, comm, request); });
}
FUNNEL_MPI_API int MPI_Rsend_init(const void* buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm,
                                  MPI_Request* request) {
  return persistent_like(buf, count, type, dest, tag, comm, request, true, "MPI_Rsend_init",
                         [&](void* p) { return PMPI_Rsend_init(p, count, type, dest, tag, comm, request); });
}
FUNNEL_MPI_API int MPI_Bsend_init(const void* buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm,
                                  MPI_Request* request) {
  if (int rc = 0; local::enabled() && not_local_yet(true, buf, count, type, dest, tag, comm, "MPI_Bsend_init", rc))
    return rc;
  return persistent_like(buf, count, type, dest, tag, comm, request, true, "MPI_Bsend_init",
                         [&](void* p) { return PMPI_Bsend_init(p, count, type, dest, tag, comm, request); });
}
FUNNEL_MPI_API int MPI_Recv_init(void* buf, int count, MPI_Datatype type, int source, int tag, MPI_Comm comm,
                                 MPI_Request* request) {
  return persistent_like(buf, count, type, source, tag, comm, request, false, "MPI_Recv_init",
                         [&](void* p) { return PMPI_Recv_init(p, count, type, source, tag, comm, request); });
}

FUNNEL_MPI_API int MPI_Start(MPI_Request* request) {
  if (local::enabled() && request != nullptr)
    if (const int rc = local::start_persistent(*request); rc != MPI_SUCCESS) return rc;
  if (funnel::mpi::any_pending() && request != nullptr && !funnel::mpi::start_persistent(*request))
    return MPI_ERR_BUFFER;
  return PMPI_Start(request);
}

FUNNEL_MPI_API int MPI_Startall(int count, MPI_Request requests[]) {
  if (local::enabled())
    for (int i = 0; i < count; ++i)
      if (const int rc = local::start_persistent(requests[i]); rc != MPI_SUCCESS) return rc;
  if (funnel::mpi::any_pending())
    for (int i = 0; i < count; ++i)
      if (!funnel::mpi::start_persistent(requests[i])) return MPI_ERR_BUFFER;
  return PMPI_Startall(count, requests);
}

FUNNEL_MPI_API int MPI_Request_free(MPI_Request* request) {
  if (local::enabled() && request != nullptr) {
    local::forget(*request);
    if (local::busy()) local::detach(*request, nullptr);
  }
  if (funnel::mpi::any_pending() && request != nullptr) funnel::mpi::free_request(*request);
  return PMPI_Request_free(request);
}

FUNNEL_MPI_API int MPI_Iallgatherv(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf,
                                   const int recvcounts[], const int displs[], MPI_Datatype recvtype, MPI_Comm comm,
                                   MPI_Request* request) {
  return two_buffers(
      sendbuf, extent_of(sendcount, sendtype), recvbuf, extent_of(recvcounts, displs, comm_size(comm), recvtype), comm,
      "MPI_Iallgatherv",
      [&](const void* s, void* r) {
        return PMPI_Iallgatherv(s, sendcount, sendtype, r, recvcounts, displs, recvtype, comm, request);
      },
      request);
}

FUNNEL_MPI_API int MPI_Ialltoallv(const void* sendbuf, const int sendcounts[], const int sdispls[],
                                  MPI_Datatype sendtype, void* recvbuf, const int recvcounts[], const int rdispls[],
                                  MPI_Datatype recvtype, MPI_Comm comm, MPI_Request* request) {
  const int n = comm_size(comm);
  const bool in_place = sendbuf == MPI_IN_PLACE;
  return two_buffers(
      sendbuf, in_place ? funnel::mpi::Extent{} : extent_of(sendcounts, sdispls, n, sendtype), recvbuf,
      extent_of(recvcounts, rdispls, n, recvtype), comm, "MPI_Ialltoallv",
      [&](const void* s, void* r) {
        return PMPI_Ialltoallv(s, sendcounts, sdispls, sendtype, r, recvcounts, rdispls, recvtype, comm, request);
      },
      request);
}

FUNNEL_MPI_API int MPI_Igather(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf, int recvcount,
                               MPI_Datatype recvtype, int root, MPI_Comm comm, MPI_Request* request) {
  const bool here = at_root(root, comm);
  return two_buffers(
      sendbuf, extent_of(sendcount, sendtype), recvbuf,
      here ? extent_of(recvcount * comm_size(comm), recvtype) : funnel::mpi::Extent{}, comm, "MPI_Igather",
      [&](const void* s, void* r) {
        return PMPI_Igather(s, sendcount, sendtype, r, recvcount, recvtype, root, comm, request);
      },
      request);
}

FUNNEL_MPI_API int MPI_Igatherv(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf,
                                const int recvcounts[], const int displs[], MPI_Datatype recvtype, int root,
                                MPI_Comm comm, MPI_Request* request) {
  const bool here = at_root(root, comm);
  return two_buffers(
      sendbuf, extent_of(sendcount, sendtype), recvbuf,
      here ? extent_of(recvcounts, displs, comm_size(comm), recvtype) : funnel::mpi::Extent{}, comm, "MPI_Igatherv",
      [&](const void* s, void* r) {
        return PMPI_Igatherv(s, sendcount, sendtype, r, recvcounts, displs, recvtype, root, comm, request);
      },
      request);
}

FUNNEL_MPI_API int MPI_Iscatter(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf,
                                int recvcount, MPI_Datatype recvtype, int root, MPI_Comm comm, MPI_Request* request) {
  const Sides x = scatter_sides(extent_of(sendcount * comm_size(comm), sendtype), recvbuf, recvcount, recvtype, root, comm);
  return two_buffers(
      sendbuf, x.send, recvbuf, x.recv, comm, "MPI_Iscatter",
      [&](const void* s, void* r) {
        return PMPI_Iscatter(s, sendcount, sendtype, r, recvcount, recvtype, root, comm, request);
      },
      request);
}

FUNNEL_MPI_API int MPI_Iscatterv(const void* sendbuf, const int sendcounts[], const int displs[],
                                 MPI_Datatype sendtype, void* recvbuf, int recvcount, MPI_Datatype recvtype, int root,
                                 MPI_Comm comm, MPI_Request* request) {
  const Sides x = scatter_sides(extent_of(sendcounts, displs, comm_size(comm), sendtype), recvbuf, recvcount, recvtype,
                                root, comm);
  return two_buffers(
      sendbuf, x.send, recvbuf, x.recv, comm, "MPI_Iscatterv",
      [&](const void* s, void* r) {
        return PMPI_Iscatterv(s, sendcounts, displs, sendtype, r, recvcount, recvtype, root, comm, request);
      },
      request);
}

FUNNEL_MPI_API int MPI_Ireduce_scatter_block(const void* sendbuf, void* recvbuf, int recvcount, MPI_Datatype type,
                                             MPI_Op op, MPI_Comm comm, MPI_Request* request) {
  const Sides x = reduce_scatter_sides(sendbuf, recvcount * comm_size(comm), recvcount, type);
  return two_buffers(
      sendbuf, x.send, recvbuf, x.recv, comm, "MPI_Ireduce_scatter_block",
      [&](const void* s, void* r) { return PMPI_Ireduce_scatter_block(s, r, recvcount, type, op, comm, request); },
      request);
}

FUNNEL_MPI_API int MPI_Ireduce_scatter(const void* sendbuf, void* recvbuf, const int recvcounts[], MPI_Datatype type,
                                       MPI_Op op, MPI_Comm comm, MPI_Request* request) {
  const Sides x =
      reduce_scatter_sides(sendbuf, sum_of(recvcounts, comm_size(comm)), recvcounts[comm_rank(comm)], type);
  return two_buffers(
      sendbuf, x.send, recvbuf, x.recv, comm, "MPI_Ireduce_scatter",
      [&](const void* s, void* r) { return PMPI_Ireduce_scatter(s, r, recvcounts, type, op, comm, request); }, request);
}

FUNNEL_MPI_API int MPI_Iscan(const void* sendbuf, void* recvbuf, int count, MPI_Datatype type, MPI_Op op,
                             MPI_Comm comm, MPI_Request* request) {
  return reduce_like(
      sendbuf, recvbuf, count, type, comm, true, "MPI_Iscan",
      [&](const void* s, void* r) { return PMPI_Iscan(s, r, count, type, op, comm, request); }, request);
}

FUNNEL_MPI_API int MPI_Iexscan(const void* sendbuf, void* recvbuf, int count, MPI_Datatype type, MPI_Op op,
                               MPI_Comm comm, MPI_Request* request) {
  return reduce_like(
      sendbuf, recvbuf, count, type, comm, true, "MPI_Iexscan",
      [&](const void* s, void* r) { return PMPI_Iexscan(s, r, count, type, op, comm, request); }, request);
}

// ---- matched receives, local reductions, packing ------------------------------------------------

FUNNEL_MPI_API int MPI_Mrecv(void* buf, int count, MPI_Datatype type, MPI_Message* message, MPI_Status* status) {
  if (const auto rc = local::mrecv(buf, count, type, message, status, nullptr)) return *rc;  // matched GPU-local
  std::vector<Staged> b;
  b.emplace_back(buf, extent_of(count, type), false, true, "MPI_Mrecv");
  if (!any_staged(b)) return PMPI_Mrecv(buf, count, type, message, status);
  return staged_call(MPI_COMM_WORLD, b, [&] { return PMPI_Mrecv(b[0].ptr(), count, type, message, status); });
}

FUNNEL_MPI_API int MPI_Imrecv(void* buf, int count, MPI_Datatype type, MPI_Message* message, MPI_Request* request) {
  if (const auto rc = local::mrecv(buf, count, type, message, MPI_STATUS_IGNORE, request)) return *rc;
  std::vector<Staged> b;
  b.emplace_back(buf, extent_of(count, type), false, true, "MPI_Imrecv");
  if (!any_staged(b)) return PMPI_Imrecv(buf, count, type, message, request);
  void* p = b[0].ptr();
  return staged_start(MPI_COMM_WORLD, std::move(b), request, [&] { return PMPI_Imrecv(p, count, type, message, request); });
}

FUNNEL_MPI_API int MPI_Reduce_local(const void* inbuf, void* inoutbuf, int count, MPI_Datatype type, MPI_Op op) {
  std::vector<Staged> b;
  b.emplace_back(inbuf, extent_of(count, type), true, false, "MPI_Reduce_local");
  b.emplace_back(inoutbuf, extent_of(count, type), true, true, "MPI_Reduce_local");
  if (!any_staged(b)) return PMPI_Reduce_local(inbuf, inoutbuf, count, type, op);
  return staged_call(MPI_COMM_WORLD, b, [&] { return PMPI_Reduce_local(b[0].ptr(), b[1].ptr(), count, type, op); });
}

// The packed side is bytes: from *position, as many as the data packs to (MPI_Pack_size) or as the
// input holds (insize).
FUNNEL_MPI_API int MPI_Pack(const void* inbuf, int incount, MPI_Datatype type, void* outbuf, int outsize,
                            int* position, MPI_Comm comm) {
  int packed = 0;
  PMPI_Pack_size(incount, type, comm, &packed);
  const int at = position != nullptr ? *position : 0;
  std::vector<Staged> b;
  b.emplace_back(inbuf, extent_of(incount, type), true, false, "MPI_Pack");
  b.emplace_back(outbuf, funnel::mpi::Extent{at, static_cast<size_t>(std::max(0, std::min(packed, outsize - at)))},
                 false, true, "MPI_Pack");
  if (!any_staged(b)) return PMPI_Pack(inbuf, incount, type, outbuf, outsize, position, comm);
  return staged_call(comm, b, [&] { return PMPI_Pack(b[0].ptr(), incount, type, b[1].ptr(), outsize, position, comm); });
}

FUNNEL_MPI_API int MPI_Unpack(const void* inbuf, int insize, int* position, void* outbuf, int outcount,
                              MPI_Datatype type, MPI_Comm comm) {
  const int at = position != nullptr ? *position : 0;
  std::vector<Staged> b;
  b.emplace_back(inbuf, funnel::mpi::Extent{at, static_cast<size_t>(std::max(0, insize - at))}, true, false,
                 "MPI_Unpack");
  b.emplace_back(outbuf, extent_of(outcount, type), false, true, "MPI_Unpack");
  if (!any_staged(b)) return PMPI_Unpack(inbuf, insize, position, outbuf, outcount, type, comm);
  return staged_call(comm, b,
                     [&] { return PMPI_Unpack(b[0].ptr(), insize, position, b[1].ptr(), outcount, type, comm); });
}

// The buffer MPI_Bsend copies messages into must be host memory: a device one is refused.
FUNNEL_MPI_API int MPI_Buffer_attach(void* buffer, int size) {
  const funnel::mpi::Kind k = funnel::mpi::kind_of(buffer, {0, static_cast<size_t>(std::max(size, 0))});
  if (k == funnel::mpi::Kind::Host) return PMPI_Buffer_attach(buffer, size);
  funnel::mpi::warn(k == funnel::mpi::Kind::Device
                        ? "MPI_Buffer_attach: the buffer is device memory; MPI_Bsend copies into host memory only "
                          "(give it host memory): MPI_ERR_BUFFER"
                        : "MPI_Buffer_attach: the buffer is neither host memory of this process nor inside one of "
                          "its live CUDA allocations: MPI_ERR_BUFFER");
  return funnel::mpi::buffer_error(MPI_COMM_WORLD);
}

// ---- neighbourhood collectives: the degrees from the communicator's topology -------------------

namespace {

// In- and out-degree of this rank in comm's topology (0, 0 without one).
std::pair<int, int> degrees(MPI_Comm comm) {
  int kind = MPI_UNDEFINED;
  PMPI_Topo_test(comm, &kind);
  if (kind == MPI_CART) {
    int dims = 0;
    PMPI_Cartdim_get(comm, &dims);
    return {2 * dims, 2 * dims};
  }
  if (kind == MPI_GRAPH) {
    int n = 0;
    PMPI_Graph_neighbors_count(comm, comm_rank(comm), &n);
    return {n, n};
  }
  if (kind == MPI_DIST_GRAPH) {
    int in = 0, out = 0, weighted = 0;
    PMPI_Dist_graph_neighbors_count(comm, &in, &out, &weighted);
    return {in, out};
  }
  return {0, 0};
}

}  // namespace

FUNNEL_MPI_API int MPI_Neighbor_allgather(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf,
                                          int recvcount, MPI_Datatype recvtype, MPI_Comm comm) {
  const int in = degrees(comm).first;
  return two_buffers(sendbuf, extent_of(sendcount, sendtype), recvbuf, extent_of(recvcount * in, recvtype), comm,
                     "MPI_Neighbor_allgather", [&](const void* s, void* r) {
                       return PMPI_Neighbor_allgather(s, sendcount, sendtype, r, recvcount, recvtype, comm);
                     });
}

FUNNEL_MPI_API int MPI_Ineighbor_allgather(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf,
                                           int recvcount, MPI_Datatype recvtype, MPI_Comm comm, MPI_Request* request) {
  const int in = degrees(comm).first;
  return two_buffers(
      sendbuf, extent_of(sendcount, sendtype), recvbuf, extent_of(recvcount * in, recvtype), comm,
      "MPI_Ineighbor_allgather",
      [&](const void* s, void* r) {
        return PMPI_Ineighbor_allgather(s, sendcount, sendtype, r, recvcount, recvtype, comm, request);
      },
      request);
}

FUNNEL_MPI_API int MPI_Neighbor_allgatherv(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf,
                                           const int recvcounts[], const int displs[], MPI_Datatype recvtype,
                                           MPI_Comm comm) {
  const int in = degrees(comm).first;
  return two_buffers(sendbuf, extent_of(sendcount, sendtype), recvbuf, extent_of(recvcounts, displs, in, recvtype),
                     comm, "MPI_Neighbor_allgatherv", [&](const void* s, void* r) {
                       return PMPI_Neighbor_allgatherv(s, sendcount, sendtype, r, recvcounts, displs, recvtype, comm);
                     });
}

FUNNEL_MPI_API int MPI_Ineighbor_allgatherv(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf,
                                            const int recvcounts[], const int displs[], MPI_Datatype recvtype,
                                            MPI_Comm comm, MPI_Request* request) {
  const int in = degrees(comm).first;
  return two_buffers(
      sendbuf, extent_of(sendcount, sendtype), recvbuf, extent_of(recvcounts, displs, in, recvtype), comm,
      "MPI_Ineighbor_allgatherv",
      [&](const void* s, void* r) {
        return PMPI_Ineighbor_allgatherv(s, sendcount, sendtype, r, recvcounts, displs, recvtype, comm, request);
      },
      request);
}

FUNNEL_MPI_API int MPI_Neighbor_alltoall(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf,
                                         int recvcount, MPI_Datatype recvtype, MPI_Comm comm) {
  const auto [in, out] = degrees(comm);
  return two_buffers(sendbuf, extent_of(sendcount * out, sendtype), recvbuf, extent_of(recvcount * in, recvtype), comm,
                     "MPI_Neighbor_alltoall", [&](const void* s, void* r) {
                       return PMPI_Neighbor_alltoall(s, sendcount, sendtype, r, recvcount, recvtype, comm);
                     });
}

FUNNEL_MPI_API int MPI_Ineighbor_alltoall(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf,
                                          int recvcount, MPI_Datatype recvtype, MPI_Comm comm, MPI_Request* request) {
  const auto [in, out] = degrees(comm);
  return two_buffers(
      sendbuf, extent_of(sendcount * out, sendtype), recvbuf, extent_of(recvcount * in, recvtype), comm,
      "MPI_Ineighbor_alltoall",
      [&](const void* s, void* r) {
        return PMPI_Ineighbor_alltoall(s, sendcount, sendtype, r, recvcount, recvtype, comm, request);
      },
      request);
}

FUNNEL_MPI_API int MPI_Neighbor_alltoallv(const void* sendbuf, const int sendcounts[], const int sdispls[],
                                          MPI_Datatype sendtype, void* recvbuf, const int recvcounts[],
                                          const int rdispls[], MPI_Datatype recvtype, MPI_Comm comm) {
  const auto [in, out] = degrees(comm);
  return two_buffers(sendbuf, extent_of(sendcounts, sdispls, out, sendtype), recvbuf,
                     extent_of(recvcounts, rdispls, in, recvtype), comm, "MPI_Neighbor_alltoallv",
                     [&](const void* s, void* r) {
                       return PMPI_Neighbor_alltoallv(s, sendcounts, sdispls, sendtype, r, recvcounts, rdispls,
                                                      recvtype, comm);
                     });
}

FUNNEL_MPI_API int MPI_Ineighbor_alltoallv(const void* sendbuf, const int sendcounts[], const int sdispls[],
                                           MPI_Datatype sendtype, void* recvbuf, const int recvcounts[],
                                           const int rdispls[], MPI_Datatype recvtype, MPI_Comm comm,
                                           MPI_Request* request) {
  const auto [in, out] = degrees(comm);
  return two_buffers(
      sendbuf, extent_of(sendcounts, sdispls, out, sendtype), recvbuf, extent_of(recvcounts, rdispls, in, recvtype),
      comm, "MPI_Ineighbor_alltoallv",
      [&](const void* s, void* r) {
        return PMPI_Ineighbor_alltoallv(s, sendcounts, sdispls, sendtype, r, recvcounts, rdispls, recvtype, comm,
                                        request);
      },
      request);
}
