#include "node_server.hpp"

#include <chrono>
#include <filesystem>
#include <thread>

#include "funnel/common/config.hpp"
#include "funnel/common/control_client.hpp"
#include "funnel/common/launcher.hpp"

namespace funnel::mpi {

NodeServer find_or_start_node_server() {
  const Settings s = Settings::from_environment();
  // A server that answers already was started by someone else (the Slurm prolog, a
  // user, or a rank of this job that made a CUDA call before MPI_Init): not ours to stop.
  if (connect_server(s)) return NodeServer{false};
  // The node's ranks race here: one starts it, the others find it under the start lock.
  bool started = false;
  connect_or_start_server(s, &started);
  return NodeServer{started};
}

void stop_node_server() {
  const Settings s = Settings::from_environment();
  // The other ranks may still be working: the server stops once the last one detached (a week
  // is the longest wait the verb takes).
  control_request(s, "shutdown", "timeout_s=604800");
  // The server answers first and then stops; waiting for its run directory to go makes
  // "mpirun returned" mean "nothing of funnel is left on the node".
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  std::error_code ec;
  while (std::filesystem::exists(s.run_dir, ec) && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
}

}  // namespace funnel::mpi
