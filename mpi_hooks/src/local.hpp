// GPU-local messages (FUNNEL_MPI_LOCAL=1; doc/mpi.md, "GPU-local messages"): a point-to-point
// message between two ranks attached to the same funnel-server, from a device buffer to a device
// buffer, is one device-to-device copy in the server's context (funnel_msg_post), not a trip
// through MPI.  The contract the program keeps (both sides must route a message the same way,
// and each decides alone): on a communicator whose ranks share a server, every device-buffer
// send and receive between them goes this way, so receives into device buffers name their source
// and tag, a device send meets a device receive, and nothing relies on MPI's eager buffering (a
// blocking send returns once its receive has taken the data).  What breaks it visibly is refused
// by name; a send or receive left waiting says so on stderr after 10 s.
#pragma once
#include <mpi.h>

#include <cstddef>
#include <optional>
#include <vector>

#include "funnel/funnel.h"

namespace funnel::mpi::local {

// At MPI_Init, after the attach (no MPI collective: a rank of the job not under funnel calls none
// of this): joins the job's world on the server (funnel_msg_world) whatever the setting, reads
// FUNNEL_MPI_LOCAL and numbers MPI_COMM_WORLD.  The ranks a message may go GPU-local to are learnt
// from the server at the first message to each (those of the world that joined with the setting
// before it settled).
void init() noexcept;
// Waits until this node's ranks of the job have joined (as many as the launcher put here, or
// 5 s after the first joined) and returns how many did; -1 when this rank did not join.
int settled_ranks() noexcept;
bool enabled() noexcept;

// A communicator made by a collective call over `parent` (MPI_Comm_dup, split, create, the
// topology constructors): numbered after its parent (the same number at every member, as each
// member counts the parent's creations).  `made` may be MPI_COMM_NULL (the count still goes on).
void comm_made(MPI_Comm parent, MPI_Comm made) noexcept;

enum class Route { Mpi, Local, Refuse };
// How one half goes: Mpi (staged or as it is), Local (`env` and `bytes` filled, `start` the first
// byte), or Refuse (said on stderr: the caller raises `error` through the communicator).
struct Half {
  funnel_envelope env{};
  void* start = nullptr;
  size_t bytes = 0;
  int error = MPI_SUCCESS;
};
// `take_seq` false: the route only (a persistent request's init; its start takes the number).
Route route(bool send, const void* buf, int count, MPI_Datatype type, int peer, int tag, MPI_Comm comm,
            const char* call, Half& h, bool take_seq = true);

// MPI_Probe / MPI_Iprobe after MPI's own probe found nothing: whether a GPU-local send from
// `source` with `tag` (either may be a wildcard) waits for this rank's next receive of it on
// `comm`; then `status` says its source, tag and count.
bool probe(int source, int tag, MPI_Comm comm, MPI_Status* status) noexcept;
// MPI_Mprobe / MPI_Improbe after MPI's own matched probe found nothing: as probe(), and the
// message is matched: its receive's sequence number taken now (a later receive of that source and
// tag takes the next message), *message a handle of the hooks' own that only mrecv() takes.
// Always false where MPI_Message is not a pointer (MPICH's is an int).
bool matched_probe(int source, int tag, MPI_Comm comm, MPI_Message* message, MPI_Status* status) noexcept;
// MPI_Mrecv / MPI_Imrecv (request non-null) of a message matched_probe() matched, *message set
// to MPI_MESSAGE_NULL: received GPU-local, into a dense device buffer directly, else through a
// device buffer of its own and then unpacked on the host (a non-contiguous device buffer: received
// and dropped, refused by name; MPI_Imrecv's request is then complete at once); nullopt for any
// other message (MPI's).
std::optional<int> mrecv(void* buf, int count, MPI_Datatype type, MPI_Message* message, MPI_Status* status,
                         MPI_Request* request) noexcept;
// Blocking: posts and waits (MPI progress meanwhile).  A receive fills `status` (source `peer`, tag,
// count); `peer` and `tag` also name the half on stderr if it fails.
int blocking(bool send, const Half& h, int peer, int tag, MPI_Comm comm, MPI_Status* status, const char* call);
// Non-blocking: a generalized request (MPI_Grequest_start) that the Wait/Test wrappers complete.
int start(bool send, const Half& h, int peer, int tag, MPI_Comm comm, MPI_Request* request, const char* call);

// Persistent requests (MPI_Send_init, Ssend_init, Rsend_init, Recv_init): true when this one is
// GPU-local (or refused: `rc` says which); MPI then holds a placeholder in *request (a zero-count
// request to MPI_PROC_NULL), each start_persistent posts a half, and the completion calls keep
// the placeholder from MPI until the half ended (hidden()) and report its status (raise_failed).
bool persistent_init(bool send, const void* buf, int count, MPI_Datatype type, int peer, int tag, MPI_Comm comm,
                     MPI_Request* request, const char* call, int& rc) noexcept;
// MPI_Start of `request`: posts its half if it is a persistent GPU-local one (else nothing).
int start_persistent(MPI_Request request) noexcept;
// MPI_Request_free.
void forget(MPI_Request request) noexcept;
// The indices of persistent GPU-local requests among `requests` whose half has not ended: the
// any/some calls hand MPI_REQUEST_NULL in their place.
std::vector<int> hidden(const MPI_Request* requests, int n) noexcept;

// MPI_Request_free of a GPU-local request: completed here once its message ended (then MPI frees
// it); `bounce` (a buffered send's copy) freed then.  Nothing for other requests.
void detach(MPI_Request request, void* bounce) noexcept;
// MPI_Bsend / MPI_Ibsend of a GPU-local half: the message copied to a device buffer of its own
// (cudaMalloc, cudaMemcpy on the legacy stream), sent from there by a detached request; the call
// returns at once, as a buffered send does (MPI_Ibsend's request is complete at once).
int bsend(const Half& h, int dest, int tag, MPI_Comm comm, const char* call) noexcept;
int ibsend(const Half& h, int dest, int tag, MPI_Comm comm, MPI_Request* request, const char* call) noexcept;
// MPI_Finalize: waits for the detached requests' messages (saying so after 10 s).
void finish() noexcept;

// Whether any local request is outstanding (the Wait/Test wrappers' fast path).
bool any() noexcept;
// Whether the completion calls have GPU-local work to do: a request outstanding, or an error of
// a completed one not raised yet (else they are the staged path's or PMPI's own).
bool busy() noexcept;
// Completes (MPI_Grequest_complete) the local requests among `requests` whose message ended.
void poll(const MPI_Request* requests, int n) noexcept;
// Waits until every local request among `requests` ended (MPI progress meanwhile).
void settle(const MPI_Request* requests, int n) noexcept;
// Whether some local request among `requests` has not ended.
bool outstanding(const MPI_Request* requests, int n) noexcept;
// After a completion call completed some of `before` (the handles as they were): fills the
// statuses of persistent GPU-local ones (their placeholder's say MPI_PROC_NULL), and raises the
// first error of a GPU-local one among them through its communicator's handler and returns it
// (`many`: MPI_ERR_IN_STATUS, each one's error in statuses[i]; else in statuses[0]).
// MPI_SUCCESS when none failed.
int raise_failed(const MPI_Request* before, int n, MPI_Status* statuses, bool many) noexcept;
// Lets the MPI library progress (a probe on a private communicator).
void progress() noexcept;

}  // namespace funnel::mpi::local
