// A client's graphs on the server (doc/design/graphs.md): builds under way (GraphNode records,
// each checked as it comes) and executable graphs.  Each keeps what its nodes name alive (the
// kernels' modules, the events), and the memory its copies and memsets touch is checked again
// at every launch, so a graph never reaches memory the client no longer holds.
#pragma once
#include <cstdint>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <utility>
#include <vector>

#include "funnel/ipc/channel_layout.hpp"
#include "funnel/ipc/commands.hpp"
#include "funnel/server/backend.hpp"

namespace funnel::server {

// A region a node reads or writes: checked again before every launch.
struct GraphRegion {
  ipc::Location where;
  uint64_t pitch;
  uint64_t width;
  uint64_t height;
};

struct GraphNodes {
  int device = 0;
  std::vector<GraphNodeDesc> nodes;
  std::vector<GraphRegion> regions;
  std::vector<uint64_t> recorded_events;  // event ids of the EventRecord nodes
  std::vector<std::pair<uint32_t, uint32_t>> host_words;  // Host nodes: reached and done slots
  std::vector<std::shared_ptr<BackendModule>> modules;
  std::vector<std::shared_ptr<BackendKernel>> kernels;
  std::vector<std::shared_ptr<BackendEvent>> events;
  // Whether `other` has the same kinds and dependencies, node for node (an update's condition).
  bool same_shape(const GraphNodes& other) const noexcept {
    if (other.nodes.size() != nodes.size()) return false;
    for (size_t i = 0; i < nodes.size(); ++i)
      if (nodes[i].kind != other.nodes[i].kind || nodes[i].deps != other.nodes[i].deps ||
          nodes[i].part != other.nodes[i].part || nodes[i].cond != other.nodes[i].cond)
        return false;
    return true;
  }
};

// A graph tree (ipc::GraphTreeCmd): the backend's tree (its shape checked and kept here) and the
// executable graph made of it, if one lives (CUDA allows one at a time).
struct GraphTreeEntry {
  int device = 0;
  std::unique_ptr<BackendGraphTree> tree;
  uint64_t exec = 0;
};

struct GraphExecEntry {
  GraphNodes nodes;
  std::shared_ptr<GraphTreeEntry> tree;  // a tree's graph: kept while the executable graph lives
  std::unique_ptr<BackendGraph> graph;   // declared last: destroyed before what it uses
};

// The words of every host node of a client's executable graphs, for a release when the client is
// gone (Worker::release_host_funcs): a launch waits at each host node until the client answers, so
// a gone client's launches would hold their streams for ever.  A released node is answered by a
// thread of its own for as long as launches keep reaching host nodes (each launch needs its own
// answer), until the worker's teardown ends (`stopped`, after which the channel goes).
struct GraphHostWords {
  std::mutex mu;
  std::vector<std::pair<uint32_t, uint32_t>> words;  // reached, done
  bool releasing = false;
  bool stopped = false;
  // Answers every host node a launch waits at (reached 1, done 0).  mu held.
  void answer_waiting(const ipc::ChannelView& v) {
    for (const auto& [reached, done] : words)
      if (v.event_state(reached).load(std::memory_order_acquire) == 1 &&
          v.event_state(done).load(std::memory_order_acquire) == 0)
        v.event_state(done).store(1, std::memory_order_release);
  }
};

struct ClientGraphs {
  std::unordered_map<uint64_t, GraphNodes> builds;
  std::unordered_map<uint64_t, GraphExecEntry> execs;
  std::unordered_map<uint64_t, std::shared_ptr<GraphTreeEntry>> trees;
  void clear() {
    execs.clear();
    builds.clear();
    trees.clear();
  }
};

}  // namespace funnel::server
