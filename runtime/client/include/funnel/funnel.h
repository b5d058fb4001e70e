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
 * Returns the first error of the drained work (0 if none, or if not attached). */
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

#ifdef __cplusplus
}
#endif
#endif
