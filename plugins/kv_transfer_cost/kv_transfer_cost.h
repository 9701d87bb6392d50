#pragma once
// KvTransferCost: places a Prefill or Decode instance of an LLM serving pool where moving the KV
// cache between it and the pool's counterpart instances is cheap (same node, then the same NVLink
// domain, leaf, spine, zone), after llm-d's P/D disaggregation: every request's KV cache crosses
// the network once from a Prefill to a Decode instance, so the path between them is paid per
// request. The cost model is pd::Estimate / pd::TransferSeconds (include/toposched/pd/network.h).

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "toposched/common/status.h"
#include "toposched/framework/plugin.h"
#include "toposched/framework/registry.h"
#include "toposched/pd/network.h"

namespace toposched::plugins::kv_transfer_cost {

inline constexpr std::string_view kName = "KvTransferCost";
// High because it counts only for pods of a Prefill/Decode pool (others: not counted, see
// ScoreResult::counted): for those, the network path is the placement's main concern. 20 is
// the weight at which the simulator's P/D pods reach their cheapest path more often than
// first-fit's beside ExpectedFragmentation (weight 15); the measurements are in
// docs/placement.md, "Prefill/Decode pools in the simulator" and "Capacity by default".
inline constexpr int kDefaultWeight = 20;
// Where the per-cycle pool data lives in the CycleState (computed by the first Score call).
inline constexpr std::string_view kCycleKey = "KvTransferCost/pool";

struct Args {
  // KV cache bytes per prompt token and a typical prompt length, when the pod's annotations
  // (toposched.io/kv-bytes-per-token, toposched.io/prompt-tokens) do not say.
  // 327680 = llama-3-70b in bf16: 2 (K,V) * 80 layers * 8 KV heads * 128 dims * 2 bytes.
  std::int64_t kv_bytes_per_token = 327680;
  std::int64_t prompt_tokens = 2048;
  // The tier whose domains a new pool gathers in (a network tier label); "" = the first tier
  // whose path is leaf, else tier 0.
  std::string anchor_tier;
  // The failure domain the pool's same-role instances spread over: "node" or a tier label.
  std::string spread_tier = "node";
  // The most the spread term subtracts (all same-role instances already in this failure domain).
  // Under the default costs and bytes the smallest step between two path kinds whose costs
  // differ is 10 points, so the spread only chooses among equally good paths
  // (PathKindGapsExceedSpreadUnderDefaults; README.md has the table).
  int spread_points = 5;
};

// Args (all optional): kvBytesPerToken (1..2^30), promptTokens (1..10^7), anchorTier,
// spreadTier, spreadPoints (0..50). Unknown keys are errors.
Result<Args> ParseArgs(const framework::PluginArgs& args);

// Score: for a pod with role prefill or decode and a pool, with a cluster view in the cycle:
//
//   cost  = mean over the pool's counterpart instances (the opposite role; role both counts as
//           either) of TransferSeconds(Estimate(path(node, member), prefill end, decode end),
//           kv_bytes_per_token * prompt_tokens); on the member's node the path is IPC only
//           when the config allows it and both the pod and the member set toposched.io/kv-ipc
//   best  = the cheapest path this network config has (the same node: IPC when the config
//           allows it and the pod sets toposched.io/kv-ipc, else RDMA loopback; each tier's
//           path; beyond), both ends of the pod's shape and PIX
//   worst = the dearest such path, both ends SYS (beyond every tier under the defaults)
//   score = round(100 * (ln worst - ln cost) / (ln worst - ln best)), clamped 0..100
//   minus round(spreadPoints * same-role members in this node's failure domain / same-role members)
//
// The pod's own end is its GPUs and NICs with the engine's worst GPU->NIC class on this node (PIX
// without a placement); each member's end is what the pool view records. On a log scale each
// step of path kind moves the score by a similar amount whatever the absolute times.
// Without counterparts yet, the pool's same-role members stand in for them (the pool gathers so
// that its counterparts can join it). Without any member, the pool's gang anchor: the domain at
// the anchor tier with the most free GPUs over schedulable nodes (ties: the lowest FNV-1a hash of
// pool + domain, so that pools spread over leaves while one pool's pods agree); nodes inside it
// score 100, others as if the counterpart sat on its first node (same shape as the pod, PIX).
// Pods with role none or both, without a pool, or cycles without a cluster view score a neutral
// 100 saying why. README.md has the worked numbers.
class KvTransferCost final : public framework::ScorePlugin {
 public:
  explicit KvTransferCost(Args args);
  std::string_view Name() const override { return kName; }
  // anchorTier and spreadTier (unless "node") must be configured tiers.
  Status CheckNetwork(const pd::NetworkConfig& network) const override;
  framework::ScoreResult Score(framework::CycleState& state, const framework::NodeInfo& node) const override;
  bool ReadsCluster() const override { return true; }

 private:
  Args args_;
  // The pools' sites kept across cycles (kv_transfer_cost.cc, PoolSites); shared by the threads
  // that score, under its own lock.
  std::shared_ptr<class SitesCache> cache_;
};

// round(100 * (ln worst - ln cost) / (ln worst - ln best)) clamped to 0..100; 100 when
// worst <= best (no room to rank).
int LogScore(double cost_seconds, double best_seconds, double worst_seconds);

struct CostBounds {
  double best_seconds = 0;
  double worst_seconds = 0;
};
// Best and worst for a pod whose instance is `own` (its worst_class is ignored): see Score.
// Not simply "same node" and "beyond": under the default costs a multi-node NVLink domain
// (400 GB/s per GPU) is cheaper than RDMA loopback on one node (50 GB/s per NIC).
CostBounds Bounds(const pd::NetworkConfig& network, const pd::Endpoint& own, bool kv_ipc, double bytes);

// 64-bit FNV-1a: the gang anchor's tie-break, stable across builds and replicas.
std::uint64_t StableHash(std::string_view pool, std::string_view domain);

Result<std::unique_ptr<framework::Plugin>> New(const framework::PluginArgs& args);

}  // namespace toposched::plugins::kv_transfer_cost
