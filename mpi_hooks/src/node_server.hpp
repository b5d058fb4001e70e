// The node's funnel-server as the MPI hooks see it: found or started by node-local
// rank 0 at MPI_Init, stopped by it at MPI_Finalize only if that MPI_Init started it.
#pragma once
#include <string>

namespace funnel::mpi {

struct NodeServer {
  bool started_here = false;  // no server answered before this job's hooks started one
};

// Node rank 0 only: connects to the run directory's server or starts it (under the
// start lock, exactly one per run directory).  Throws with the reason.
NodeServer find_or_start_node_server();

// Node rank 0 only, after every local rank detached: asks the server to stop and waits
// (bounded) until it has removed its run directory.  Throws with the reason.
void stop_node_server();

}  // namespace funnel::mpi
