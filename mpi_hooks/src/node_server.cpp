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
  connect_or_start_server(s);
  return NodeServer{true};
}

void stop_node_server() {
  const Settings s = Settings::from_environment();
  control_request(s, "shutdown");
  // The server answers first and then stops; waiting for its run directory to go makes
  // "mpirun returned" mean "nothing of funnel is left on the node".
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  std::error_code ec;
  while (std::filesystem::exists(s.run_dir, ec) && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
}

}  // namespace funnel::mpi
