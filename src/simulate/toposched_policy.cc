// The toposched policy: the framework's filter -> score -> reserve, exactly as the extender's
// filter, prioritize and bind verbs drive it, minus HTTP (bind itself is a no-op in process).

#include <algorithm>
#include <cstddef>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "plugins/registry.h"
#include "simulate_internal.h"
#include "toposched/framework/framework.h"
#include "toposched/placement/packing.h"
#include "toposched/placement/rare_class.h"

namespace toposched::simulate {
namespace {

class ToposchedPolicy : public Policy {
 public:
  ToposchedPolicy(framework::Framework framework, std::shared_ptr<const packing::ShapeMix> mix)
      : framework_(std::move(framework)), mix_(std::move(mix)) {}

  std::string_view Name() const override { return kPolicyToposched; }

  Result<std::optional<Decision>> Schedule(const PlacementRequest& request, std::vector<VirtualNode>& nodes,
                                           std::shared_ptr<const framework::ClusterView> cluster) override {
    framework::CycleState cycle = framework_.NewCycle(request);
    // What the extender gives its cycles from the store: the pool-aware plugins read it.
    cycle.SetCluster(std::move(cluster));
    cycle.SetShapeMix(mix_);
    // kube-scheduler keeps the feasible nodes and their totals, then takes the highest, capacity
    // first (framework::CapacityBand); ties go to the lowest index here (kube picks at random
    // among ties; a fixed rule keeps runs reproducible).
    candidates_.clear();
    framework::CapacityBand band(framework_.CapacityBandWidth());
    const std::optional<packing::Shape> rare = RareShapeFor(request, nodes);
    pool_nodes_.clear();
    if (rare && !request.pool.empty() && cycle.cluster() != nullptr) {
      for (const framework::PoolMember& m : cycle.cluster()->PoolMembers(request.pool)) pool_nodes_.insert(m.node);
    }
    for (std::size_t i = 0; i < nodes.size(); ++i) {
      const VirtualNode& node = nodes[i];
      if (!node.schedulable) continue;
      if (!framework_.RunFilter(cycle, node).ok()) continue;
      candidates_.push_back({framework_.RunScore(cycle, node), static_cast<int>(i)});
      // A rare node class last: the nodes that could host the rare shape serve this pod only
      // when no other node can, unless its own pool already runs there.
      candidates_.back().score.reserved = rare && packing::HostsWhenEmpty(hardware_[i], request.vendor, *rare) &&
                                          !pool_nodes_.contains(node.name);
      band.Offer(candidates_.back().score);
    }
    std::sort(candidates_.begin(), candidates_.end(), [&band](const Candidate& a, const Candidate& b) {
      if (band.Ahead(a.score, b.score)) return true;
      if (band.Ahead(b.score, a.score)) return false;
      return a.index < b.index;
    });
    RankTheBestByRemnants(cycle, request, nodes, band);
    for (const Candidate& c : candidates_) {
      VirtualNode& node = nodes[static_cast<std::size_t>(c.index)];
      // The placement Reserve claims is the cycle's cached outcome for the node; copy it before
      // Reserve changes the allocation the cache is keyed on.
      const PlacementOutcome& outcome = cycle.Outcome(node);
      if (!outcome.ok()) continue;
      Placement placement = *outcome.placement;
      const framework::PluginStatus reserved = framework_.RunReserve(cycle, node);
      if (reserved.code() == framework::Code::kError) {
        return Error("toposched on " + node.name + ": " + reserved.ToString());
      }
      // A Reserve refusal (the node changed under the cycle) sends the pod to the next best
      // node, as a failed bind sends it back to the queue.
      if (!reserved.ok()) continue;
      return std::optional<Decision>(Decision{c.index, std::move(placement)});
    }
    return std::optional<Decision>();
  }

 private:
  struct Candidate {
    framework::NodeScore score;
    int index = 0;
    long tie_rank = 0;  // RankTheBestByRemnants
  };

  // A single vGPU whose card capacity packing chooses (CycleState::share_packing): among the
  // nodes that share the best score, those whose card evens out the cluster's remnants come
  // first (packing::RemnantCounts::TieRank), then the index.
  void RankTheBestByRemnants(framework::CycleState& cycle, const PlacementRequest& request,
                             const std::vector<VirtualNode>& nodes, const framework::CapacityBand& band) {
    if (!framework_.EvenRemnants() || cycle.share_packing().mix == nullptr) return;
    std::optional<packing::RemnantCounts> remnants;  // counted once two nodes share the best place
    const int milli = packing::ShapeOf(request).milli;
    simulate::RankTheBestByRemnants(candidates_, band, [&](const Candidate& c) -> long {
      if (!remnants) {
        remnants.emplace();
        for (const VirtualNode& node : nodes) {
          if (node.schedulable && node.topology != nullptr)
            remnants->Add(*node.topology, node.allocated, request.vendor);
        }
      }
      const VirtualNode& node = nodes[static_cast<std::size_t>(c.index)];
      const PlacementOutcome& outcome = cycle.Outcome(node);
      if (!outcome.ok() || outcome.placement->gpus.size() != 1) return 0;
      return remnants->TieRank(packing::MilliLeft(*node.topology, node.allocated, outcome.placement->gpus[0]),
                               milli);
    });
  }

  // The rare shape for `request` on these nodes (packing::RareShape), when the rule is on. The
  // nodes' hardware and its census are kept while the nodes are those of the last call (a run's
  // nodes never change hardware).
  std::optional<packing::Shape> RareShapeFor(const PlacementRequest& request, const std::vector<VirtualNode>& nodes) {
    if (!framework_.RareClassLast() || mix_ == nullptr || request.rdma_nics <= 0) return std::nullopt;
    if (hardware_nodes_ != nodes.data() || hardware_.size() != nodes.size()) {
      hardware_.clear();
      std::vector<packing::NodeHardware> counted;  // as the store's census: cordoned nodes not
      for (const VirtualNode& node : nodes) {
        hardware_.push_back(packing::HardwareOf(*node.topology));
        if (node.schedulable) counted.push_back(hardware_.back());
      }
      census_ = packing::CensusOf(counted);
      hardware_nodes_ = nodes.data();
    }
    return packing::RareShape(*mix_, packing::ShapeOf(request), request.vendor, census_);
  }

  framework::Framework framework_;
  std::shared_ptr<const packing::ShapeMix> mix_;
  std::vector<Candidate> candidates_;  // reused between pods
  std::vector<packing::NodeHardware> hardware_;
  packing::HardwareCensus census_;
  const VirtualNode* hardware_nodes_ = nullptr;
  std::set<std::string, std::less<>> pool_nodes_;  // the nodes running the pod's pool
};

}  // namespace

framework::SchedulerConfig BuiltinDefaultConfig() {
  return plugins::DefaultSchedulerConfig();
}

Result<std::unique_ptr<Policy>> MakeToposchedPolicy(const framework::SchedulerConfig& config,
                                                    const framework::Registry* registry,
                                                    std::shared_ptr<const packing::ShapeMix> mix) {
  const framework::Registry builtin =
      registry == nullptr ? plugins::BuiltinRegistry() : framework::Registry();
  auto framework = framework::Framework::Create(config, registry == nullptr ? builtin : *registry);
  if (!framework.ok()) return framework.error().WithContext("toposched policy");
  return std::unique_ptr<Policy>(std::make_unique<ToposchedPolicy>(std::move(framework).value(), std::move(mix)));
}

}  // namespace toposched::simulate
