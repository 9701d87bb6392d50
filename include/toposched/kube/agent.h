#pragma once
// The agent's publisher: discovers the node's topology and keeps the node's NodeTopology object
// and its toposched.io/ labels up to date. The object's status is written when the topology's
// content changes (generation + 1) and, unchanged, once per heartbeat interval (so the
// extender can tell a silent agent from a quiet node); a re-discovery that finds the same
// machine writes nothing. Only the labels listed in AgentNodeLabels are touched on the Node.

#include <chrono>
#include <cstdint>
#include <functional>
#include <stop_token>
#include <string>

#include "toposched/common/status.h"
#include "toposched/kube/api.h"
#include "toposched/topology/node_topology.h"

namespace toposched::kube {

struct AgentOptions {
  std::string node_name;
  std::chrono::milliseconds interval{60'000};    // re-discovery period
  std::chrono::milliseconds heartbeat{300'000};  // status.heartbeatTime refresh when unchanged
  bool label_node = true;
  std::function<std::chrono::system_clock::time_point()> now;             // tests; default system_clock
  std::function<void(std::chrono::milliseconds, std::stop_token)> sleep;  // tests
};

enum class PublishOutcome : std::uint8_t {
  kCreated,    // the object did not exist
  kUpdated,    // the topology changed (generation + 1)
  kHeartbeat,  // unchanged; only heartbeatTime was refreshed
  kUnchanged,  // nothing written
};
std::string_view ToString(PublishOutcome outcome);

class AgentPublisher {
 public:
  using Discover = std::function<Result<NodeTopology>()>;
  // `api` must outlive the publisher.
  AgentPublisher(Api& api, AgentOptions options, Discover discover);

  // One round: discover, then create/update the object and the labels as needed.
  Result<PublishOutcome> PublishOnce();
  // Rounds every interval until `stop`; errors are logged and retried next round (with backoff
  // capped at the interval). Returns after the first round's result when `stop` is requested.
  void Run(std::stop_token stop);

 private:
  Api& api_;
  AgentOptions options_;
  Discover discover_;
};

}  // namespace toposched::kube
