// The node's funnel-server as the MPI hooks see it: found or started by every rank at MPI_Init
// (one of them starts it), stopped at MPI_Finalize by the rank whose MPI_Init started it.
#pragma once
#include <string>

namespace funnel::mpi {

struct NodeServer {
  bool started_here = false;  // no server answered before this job's hooks started one
};

// Connects to the run directory's server or starts it (under the start lock, exactly one
// per run directory).  Throws with the reason.
NodeServer find_or_start_node_server();

// The rank that started it, after its own detach: asks the server to stop once its clients
// detached (graceful: no new clients) and waits (bounded) until it has removed its run
// directory.  Throws with the reason.
void stop_node_server();

}  // namespace funnel::mpi
