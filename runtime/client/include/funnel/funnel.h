/* funnel's own C API, exported by funnel's client runtime (libcudart.so.13) next to
 * the CUDA runtime API.  The MPI hooks (libfunnel_mpi.so) use it at MPI_Init and
 * MPI_Finalize; a program may call it too.  Every function returns 0 or a
 * cudaError_t value, and never throws. */
#ifndef FUNNEL_FUNNEL_H
#define FUNNEL_FUNNEL_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Attaches this process to the job's funnel-server now (finding or starting it, as
 * the first CUDA call would).  0, or the cudaError_t every CUDA call will return. */
int funnel_attach(void);

/* 1 when this process is attached to a funnel-server, else 0. */
int funnel_is_attached(void);

/* Waits for this process's work on every device (as cudaDeviceSynchronize does on
 * each), then leaves the server cleanly and waits until the server has freed what
 * this process held.  Later CUDA calls fail with cudaErrorDevicesUnavailable.
 * Returns the first error of the drained work (0 if none, if not attached, or if it left
 * already). */
int funnel_detach(void);

/* What the bytes [p, p + n) are to this process's funnel client (the MPI hooks ask it of every
 * buffer argument; never attaches):
 *   FUNNEL_MEMORY_HOST     not funnel device memory: host memory of any kind as far as funnel
 *                          knows (pageable, pinned, managed, or nothing funnel ever gave out);
 *   FUNNEL_MEMORY_DEVICE   inside one live device allocation (or __device__ variable) of this
 *                          process; *device (if not null) is set to its device;
 *   FUNNEL_MEMORY_INVALID  starts in a live device allocation but runs past its end, or lies in a
 *                          device allocation freed lately. */
#define FUNNEL_MEMORY_HOST 0
#define FUNNEL_MEMORY_DEVICE 1
#define FUNNEL_MEMORY_INVALID 2
int funnel_memory_kind(const void* p, size_t n, int* device);

/* A number that changes whenever device memory appears in this process's address space (an
 * allocation, a module's global, an opened IPC handle).  A range funnel_memory_kind called host
 * memory stays host memory while it does not change (and while the program keeps it mapped), so
 * callers may keep that answer.  Never attaches. */
unsigned long long funnel_memory_generation(void);

/* ---- GPU-local messages (the MPI hooks' FUNNEL_MPI_LOCAL path; doc/mpi.md, "GPU-local
 * messages") ----
 * Processes attached to one funnel-server share its CUDA context, so a message between two of
 * them can be one device-to-device copy there.  Each side posts its half with the same envelope;
 * the server pairs a send with the receive of the same (world, comm, source, dest, tag, seq) and
 * copies on the legacy stream of the second poster's device, after the work each side queued on
 * its legacy stream before its post; the GPU then answers both sides.  Neither side has to call
 * anything between its post and its completion for the message to move. */
typedef struct funnel_envelope {
  unsigned long long world; /* the job's (any number both sides agree on) */
  unsigned long long comm;  /* the communicator's */
  int source, dest;         /* ranks of the world, >= 0 */
  int tag;
  int reserved;
  unsigned long long seq;   /* counts the messages of one (world, comm, source, dest, tag) */
} funnel_envelope;
#define FUNNEL_MSG_SEND 0
#define FUNNEL_MSG_RECV 1
/* Posts one half: `bytes` of device memory of this process at `buf` (a send's message, a
 * receive's capacity).  *handle identifies it for funnel_msg_test.  0, or a cudaError_t
 * (cudaErrorInvalidValue when [buf, buf + bytes) is not inside one device allocation). */
int funnel_msg_post(int role, const funnel_envelope* e, const void* buf, size_t bytes, int* handle);
/* A half's state: FUNNEL_MSG_PENDING, or its end, after which the handle is free again and
 * *bytes (if not null) holds the send's size: DONE; TRUNCATED (a receive smaller than the send:
 * its capacity filled); PEER_GONE (the other side's process left the server); FAILED (the copy
 * could not be queued, the envelope was posted twice, or the server is gone). */
#define FUNNEL_MSG_PENDING 0
#define FUNNEL_MSG_DONE 1
#define FUNNEL_MSG_TRUNCATED 2
#define FUNNEL_MSG_PEER_GONE 3
#define FUNNEL_MSG_FAILED 4
int funnel_msg_test(int handle, int* state, size_t* bytes);
/* Whether a send to e->dest on (e->world, e->comm) from e->source with e->tag (-1: any source, any
 * tag) is posted and waits for its receive (MPI_Probe): *found 1 and, for the first such (source,
 * tag) and its lowest seq, *out (source, tag, seq) and *bytes; *found 0 if none.  0, or a
 * cudaError_t. */
int funnel_msg_probe(const funnel_envelope* e, int* found, funnel_envelope* out, size_t* bytes);
/* The job's ranks on this server, learnt without MPI collectives (a rank not under funnel takes
 * part in none).  Joins `world` (a number every rank of the job agrees on) as world rank `rank`
 * (>= 0; -1: asks only), saying how many of the world's ranks the launcher put on this node
 * (`local_size`, 0 if unknown) and whether it takes GPU-local messages (FUNNEL_WORLD_LOCAL), and
 * asks about world rank `peer` (-1: none).  The world settles once local_size ranks joined, or
 * 5 s after its first join; a rank joining after that is an outsider.  a->self is this rank's
 * membership, a->peer the peer's (FUNNEL_PEER_NOT_YET: ask again), a->settled 1 once settled,
 * a->joined the ranks joined so far.  0, or a cudaError_t. */
#define FUNNEL_WORLD_LOCAL 1
#define FUNNEL_PEER_NOT_YET 0
#define FUNNEL_PEER_MEMBER 1
#define FUNNEL_PEER_OUTSIDER 2
typedef struct funnel_world_answer {
  int self, peer, settled, joined;
} funnel_world_answer;
int funnel_msg_world(unsigned long long world, int rank, int local_size, int flags, int peer, funnel_world_answer* a);
/* The process id of the funnel-server this process is attached to (attaching if need be); 0 if
 * there is none.  Processes of one node with the same one share a context. */
int funnel_server_pid(void);

#ifdef __cplusplus
}
#endif
#endif
