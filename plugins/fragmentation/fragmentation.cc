#include "fragmentation/fragmentation.h"

#include <algorithm>
#include <string>
#include <vector>

#include "common/plugin_util.h"
#include "toposched/framework/allocation.h"

namespace toposched::plugins::fragmentation {
namespace {

bool Contains(const std::vector<int>& v, int x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

}  // namespace

GroupCount CountIntactGroups(const NodeTopology& t, const NodeAllocation& allocated,
                             const Placement& placement) {
  struct Group {
    int pcie = -1;  // the outermost switch (pcie index)
    bool intact_before = true;
    bool touched = false;  // the placement takes one of its devices
  };
  // A node has a few switches: a short vector searched linearly, no allocation per node scored
  // beyond its array (the thread's).
  thread_local std::vector<Group> groups;
  groups.clear();
  const auto group = [](int s) -> Group& {
    for (Group& g : groups) {
      if (g.pcie == s) return g;
    }
    return groups.emplace_back(Group{s});
  };
  for (const Gpu& gpu : t.gpus) {
    const int s = t.SwitchOf(gpu.parent);
    if (s < 0) continue;
    Group& g = group(s);
    if (!GpuFree(allocated, gpu.index)) g.intact_before = false;
    if (Contains(placement.gpus, gpu.index)) g.touched = true;
  }
  // RDMA NICs are the first RdmaNicCount() entries of `nics`.
  const int rdma = t.RdmaNicCount();
  for (int n = 0; n < rdma && static_cast<std::size_t>(n) < t.nics.size(); ++n) {
    if (!t.nics[static_cast<std::size_t>(n)].rdma) continue;
    const int s = t.SwitchOf(t.nics[static_cast<std::size_t>(n)].parent);
    if (s < 0) continue;
    Group& g = group(s);
    if (NicUsed(allocated, n)) g.intact_before = false;
    if (Contains(placement.nics, n)) g.touched = true;
  }
  GroupCount count;
  count.groups = static_cast<int>(groups.size());
  for (const Group& g : groups) {
    if (!g.intact_before) continue;
    ++count.intact_before;
    if (!g.touched) ++count.intact_after;
  }
  return count;
}

framework::ScoreResult Fragmentation::Score(framework::CycleState& state,
                                            const framework::NodeInfo& node) const {
  const PlacementOutcome& outcome = state.Outcome(node);
  if (!outcome.ok()) return {framework::kMinScore, "no placement on this node -> 0"};
  if (state.packs_by_mix_without_nics()) return {framework::kMaxScore, std::string(kPacksByMix), false};
  const GroupCount c = CountIntactGroups(*node.topology, node.allocated, *outcome.placement);
  if (c.groups == 0) {
    return {framework::kMaxScore,
            "no PCIe switch groups on this node (flat or root-port topology): neutral -> 100"};
  }
  const int broken = c.intact_before - c.intact_after;
  const int score = 100 - (200 * broken + c.groups) / (2 * c.groups);  // round half up of 100*broken/groups
  if (!state.explain()) return {score, {}};                            // numbers only (the extender's verbs)
  return {score, "breaks " + std::to_string(broken) + " of " + std::to_string(c.intact_before) +
                     " intact switch groups (" + std::to_string(c.intact_after) + " left, " +
                     std::to_string(c.groups) + " on the node) -> 100 - round(100*" + std::to_string(broken) +
                     "/" + std::to_string(c.groups) + ") = " + std::to_string(score)};
}

Result<std::unique_ptr<framework::Plugin>> New(const framework::PluginArgs& args) {
  TOPOSCHED_RETURN_IF_ERROR(RequireNoArgs(args));
  return AsPlugin(std::make_unique<Fragmentation>());
}

}  // namespace toposched::plugins::fragmentation
