// IPC memory handles of both fronts (cudaIpcGetMemHandle, cuIpcGetMemHandle, ...; doc/design/ipc.md)
// between processes served by the same funnel-server: the same context, so an opened handle is
// the owner's memory at the owner's address.  A handle names the server's export (a random token)
// and the allocation; a handle of another server, or none of funnel's, is refused by name.
#pragma once
#include <cuda_runtime_api.h>

namespace funnel::client {

cudaError_t ipc_get_mem_handle(cudaIpcMemHandle_t* handle, void* ptr);
// flags: 0 or cudaIpcMemLazyEnablePeerAccess (peer access is the context's own).
cudaError_t ipc_open_mem_handle(void** ptr, const cudaIpcMemHandle_t& handle, unsigned flags);
cudaError_t ipc_close_mem_handle(void* ptr);
// Events created with cudaEventInterprocess (and cudaEventDisableTiming): the opened event is the
// same event of the server's context; records of either process are seen by the other's waits.
cudaError_t ipc_get_event_handle(cudaIpcEventHandle_t* handle, cudaEvent_t event);
cudaError_t ipc_open_event_handle(cudaEvent_t* event, const cudaIpcEventHandle_t& handle);

}  // namespace funnel::client
