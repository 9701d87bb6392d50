// The toposched policy: the framework's filter -> score -> the ranking step -> reserve, exactly
// as the extender's filter, prioritize and bind verbs drive it, minus HTTP (bind itself is a no-op
// in process).

#include <algorithm>
#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "plugins/registry.h"
#include "simulate_internal.h"
#include "toposched/framework/framework.h"
#include "toposched/framework/ranking.h"
#include "toposched/placement/packing.h"
#include "toposched/placement/rare_class.h"

namespace toposched::simulate {
namespace {

class ToposchedPolicy : public Policy {
 public:
  explicit ToposchedPolicy(ToposchedRanking ranking) : ranking_(std::move(ranking)) {}

  std::string_view Name() const override { return kPolicyToposched; }

  Result<std::optional<Decision>> Schedule(const PlacementRequest& request, std::vector<VirtualNode>& nodes,
                                           std::shared_ptr<const framework::ClusterView> cluster) override {
    framework::CycleState cycle = ranking_.Rank(request, nodes, cluster, candidates_);
    for (const framework::RankedNode& c : candidates_) {
      VirtualNode& node = nodes[c.index];
      // The placement Reserve claims is the cycle's cached outcome for the node; copy it before
      // Reserve changes the allocation the cache is keyed on.
      const PlacementOutcome& outcome = cycle.Outcome(node);
      if (!outcome.ok()) continue;
      Placement placement = *outcome.placement;
      const framework::PluginStatus reserved = ranking_.framework().RunReserve(cycle, node);
      if (reserved.code() == framework::Code::kError) {
        return Error("toposched on " + node.name + ": " + reserved.ToString());
      }
      // A Reserve refusal (the node changed under the cycle) sends the pod to the next best
      // node, as a failed bind sends it back to the queue.
      if (!reserved.ok()) continue;
      return std::optional<Decision>(Decision{static_cast<int>(c.index), std::move(placement)});
    }
    return std::optional<Decision>();
  }

 private:
  ToposchedRanking ranking_;
  std::vector<framework::RankedNode> candidates_;  // reused between pods
};

}  // namespace

framework::CycleState ToposchedRanking::Rank(const PlacementRequest& request,
                                             const std::vector<VirtualNode>& nodes,
                                             const std::shared_ptr<const framework::ClusterView>& cluster,
                                             std::vector<framework::RankedNode>& ranked) {
  // The extender gives its cycles the store's pool view: the pool-aware plugins read it.
  const framework::CycleSetup setup{.mix = mix_, .packs_by_mix = true, .explain = false, .cluster = cluster};
  framework::CycleState cycle = framework_.NewCycle(request, setup);
  // kube-scheduler keeps the feasible nodes and their totals; the ranking step orders them as
  // the extender's prioritize scores them (its one node of the best is this order's first).
  framework::CapacityBand band(framework_.CapacityBandWidth());
  const framework::RareClass rare = RareClassFor(request, nodes, cluster.get());
  framework::RemnantTie remnants(framework_, request, [&nodes, vendor = request.vendor] {
    auto counts = std::make_shared<packing::RemnantCounts>();
    for (const VirtualNode& node : nodes) framework::CountRemnantsOf(node, vendor, *counts);
    return std::shared_ptr<const packing::RemnantCounts>(std::move(counts));
  });
  ranked.clear();
  // A pod that asks CPU alone ranks as prioritize-cpu scores it.
  const bool cpu_pod =
      request.gpus == 0 && !request.IsShared() && request.rdma_nics == 0 && request.cpu_milli > 0;
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    const VirtualNode& node = nodes[i];
    if (!node.schedulable) continue;
    if (!framework_.RunFilter(cycle, node).ok()) continue;
    framework::RankedNode r{framework_.RunScore(cycle, node), order_keys_[i], -1, i};
    if (cpu_pod) {
      const framework::FreeDevices free =
          framework::FreeDevicesOf(node.topology.get(), node.allocated, false);
      r.idle_gpus = node.topology ? framework::IdleGpuShare(hardware_[i], free.gpus_by_vendor) : -1;
    }
    r.score.reserved = rare.active() && rare.Reserved(hardware_[i], node.name);
    if (remnants.on()) {
      if (const PlacementOutcome& outcome = cycle.Outcome(node); outcome.ok()) {
        r.share_left = framework::ShareLeft(cycle, node, *outcome.placement);
      }
    }
    band.Offer(r.score);
    ranked.push_back(std::move(r));
  }
  framework::RankBestFirst(ranked, band, remnants, cpu_pod);
  return cycle;
}

// Rule 1 of the ranking with the simulator's facts: the schedulable nodes' hardware census (as
// the store's) and the nodes the pool view says run the pod's pool. The nodes' hardware, census
// and order keys are kept while the nodes are those of the last call (a run's nodes never change
// hardware or name).
framework::RareClass ToposchedRanking::RareClassFor(const PlacementRequest& request,
                                                    const std::vector<VirtualNode>& nodes,
                                                    const framework::ClusterView* cluster) {
  if (hardware_nodes_ != nodes.data() || hardware_.size() != nodes.size()) {
    hardware_.clear();
    order_keys_.clear();
    std::vector<packing::NodeHardware> counted;
    for (const VirtualNode& node : nodes) {
      hardware_.push_back(packing::HardwareOf(*node.topology));
      order_keys_.push_back(framework::NodeOrderKey(node.name));
      if (node.schedulable) counted.push_back(hardware_.back());
    }
    census_ = packing::CensusOf(counted);
    hardware_nodes_ = nodes.data();
  }
  return framework::RareClass(framework_, request, mix_.get(), census_,
                              [&]() -> std::shared_ptr<const std::vector<std::string>> {
                                if (cluster == nullptr) return nullptr;
                                return framework::PoolNodesOf(cluster->PoolMembers(request.pool));
                              });
}

framework::SchedulerConfig BuiltinDefaultConfig() {
  return plugins::DefaultSchedulerConfig();
}

Result<std::unique_ptr<Policy>> MakeToposchedPolicy(const framework::SchedulerConfig& config,
                                                    const framework::Registry* registry,
                                                    std::shared_ptr<const packing::ShapeMix> mix) {
  const framework::Registry builtin =
      registry == nullptr ? plugins::BuiltinRegistry() : framework::Registry();
  TOPOSCHED_ASSIGN_OR_RETURN_CTX(
      auto framework, framework::Framework::Create(config, registry == nullptr ? builtin : *registry),
      "toposched policy");
  return std::unique_ptr<Policy>(
      std::make_unique<ToposchedPolicy>(ToposchedRanking(std::move(framework), std::move(mix))));
}

}  // namespace toposched::simulate
