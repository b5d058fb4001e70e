/* funnel's own C API, exported by funnel's client runtime (libcudart.so.13) next to
 * the CUDA runtime API.  The MPI hooks (libfunnel_mpi.so) use it at MPI_Init and
 * MPI_Finalize; a program may call it too.  Every function returns 0 or a
 * cudaError_t value, and never throws. */
#ifndef FUNNEL_FUNNEL_H
#define FUNNEL_FUNNEL_H

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

#ifdef __cplusplus
}
#endif
#endif
