// kube-scheduler's verbs: filter, prioritize, bind, preempt (adapters.h).

#include <array>
#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "adapters.h"
#include "explain.h"
#include "node_verdicts.h"
#include "rare_class_rule.h"
#include "toposched/framework/allocation.h"
#include "toposched/metrics/logging.h"
#include "verbs.h"

namespace toposched::extender {
namespace {

using framework::Code;
using metrics::LogLevel;
using server::HttpResponse;

// Per-thread reply buffers, kept between calls so that a call naming thousands of nodes
// allocates nothing in steady state. Only views into the current request live here.
constexpr std::size_t kHostsSlots = 64;

struct Scratch {
  std::vector<NodeRef> passed;
  std::vector<NodeFailure> failed, unresolvable;
  std::vector<HostScore> scores;
  std::vector<const ClassVerdict*> verdicts;
  std::vector<std::uint32_t> passed_at;  // snapshot positions of `passed`
  std::vector<std::string_view> names;   // the call's node names
  std::vector<std::size_t> at;           // their snapshot positions
  std::vector<char> reserved;            // prioritize: the node is kept for a rarer shape
  // prioritize, a pod that asks no device (PodEntry::packs_cpu): each node's share of idle GPUs
  // (CpuPodScore); -1 where toposched knows no devices.
  std::vector<double> idle;
  std::vector<std::uint64_t> order_keys;  // prioritize: each node's NodeOrderKey (0: not in the snapshot)
  // prioritize: whether a verdict's nodes could host the rare shape, by the verdict's address.
  std::array<std::pair<const ClassVerdict*, bool>, kHostsSlots> hosts_rare{};
};
Scratch& ThreadScratch() {
  thread_local Scratch scratch;
  return scratch;
}

}  // namespace

void KubeVerbs::FilterOrPrioritize(std::string_view body, HttpResponse& resp, Want want,
                                   bool device_free_only) {
  const bool prioritize = want == Want::kScores;
  const Verb verb = device_free_only ? Verb::kPrioritizeCpu : prioritize ? Verb::kPrioritize : Verb::kFilter;
  Result<ExtenderArgsView> args = ThreadReader().ReadExtenderArgs(body);
  if (!args.ok()) return BadRequest(resp, verb, args.error());
  const ExtenderArgsView& a = *args;
  const std::vector<NodeRef>& nodes = a.nodes;
  const bool nodes_mode = a.nodes_given && !a.node_names_given;

  Result<std::shared_ptr<PodEntry>> entry = evaluator_.EntryFor(a.pod);
  if (!entry.ok()) {
    metrics::Log(LogLevel::kWarn, {VerbName(verb), PodLabel(a.pod.pod_namespace, a.pod.name, a.pod.uid), ""},
                 entry.error().message());
    if (prioritize) {
      // Prioritize has no error field; kube-scheduler ignores prioritize failures anyway.
      WriteError(resp, verb, 400, entry.error().message());
    } else {
      WriteFilterResult(resp.body, nodes_mode, {}, {}, {}, entry.error().message());
    }
    return;
  }
  PodEntry& e = **entry;
  // A pod whose devices come from DRA claims reaches only the entry without managedResources
  // (it asks no extended resource): it is ranked here for the devices its claims ask.
  if (device_free_only && e.interested && !e.request.dra) {
    // prioritize-cpu: the extender entry without managedResources, called for every pod. A pod
    // asking devices is scored by the main entry's prioritize; an empty list adds nothing
    // (schedule_one.go adds the scores of the hosts a reply names).
    resp.body.append("[]");
    return;
  }
  const bool packs_cpu = prioritize && e.packs_cpu;
  if (!e.interested && !packs_cpu) {
    // Not ours (no GPUs or RDMA NICs, no CPU to place): every node passes, every score is equal.
    if (prioritize) {
      std::vector<HostScore> scores;
      scores.reserve(nodes.size());
      for (const NodeRef& n : nodes) scores.push_back({n.name, 0});
      WriteHostPriorityList(resp.body, scores);
    } else {
      WriteFilterResult(resp.body, nodes_mode, nodes, {}, {}, "");
    }
    return;
  }

  NodeVerdicts verdict(evaluator_, e, evaluator_.store().snapshot(), want);
  const state::Snapshot& snap = verdict.snapshot();
  const std::string pod = PodLabel(e.pod_namespace, e.pod_name, e.uid);
  Scratch& scratch = ThreadScratch();
  resp.body.reserve(a.nodes.size() * 40 + 256);
  if (prioritize) {
    // Capacity first (framework::CapacityBand): the nodes whose capacity score is far below
    // the best fitting node's score 0, the others 1..10 by their totals.
    std::vector<HostScore>& scores = scratch.scores;
    std::vector<const ClassVerdict*>& verdicts = scratch.verdicts;
    std::vector<char>& reserved_at = scratch.reserved;
    std::vector<double>& idle = scratch.idle;
    std::vector<std::uint64_t>& order_keys = scratch.order_keys;
    order_keys.clear();
    scores.clear();
    verdicts.clear();
    reserved_at.clear();
    idle.clear();
    framework::CapacityBand band(evaluator_.framework().CapacityBandWidth());
    // A rare node class last: the nodes kept for a rarer shape score 0 while another node fits.
    const framework::RareClass rare =
        RareClassFor(evaluator_.framework(), e.request, e.mix.get(), snap, &evaluator_.store());
    if (rare.active())
      scratch.hosts_rare.fill({nullptr, false});  // another call's verdicts may share an address
    // The nodes our filter passed, in its reply's order: one comparison per name instead of a
    // lookup (a hint advances only when it names the node, so extra or missing names cost one
    // lookup each).
    const std::shared_ptr<const std::vector<std::uint32_t>> hints = e.passed_order();
    std::size_t next_hint = 0;
    bool gpu_node_listed = false;  // a pod asking no device: whether it could take a GPU node's CPU
    for (const NodeRef& n : nodes) {
      std::size_t hint = state::Snapshot::npos;
      if (hints != nullptr && next_hint < hints->size()) hint = (*hints)[next_hint];
      const std::size_t i = snap.IndexOf(n.name, hint);
      if (i == hint && i != state::Snapshot::npos) ++next_hint;
      order_keys.push_back(i == state::Snapshot::npos ? 0
                                                      : snap.briefs()[i].order_key);  // 0: hashed if needed
      // A pod that asks no device strands nothing on a node where toposched knows no devices
      // (no NodeTopology: a CPU node, or one whose agent has not published): the top score.
      if (packs_cpu && (i == state::Snapshot::npos || snap.nodes()[i]->topology == nullptr)) {
        verdicts.push_back(nullptr);
        idle.push_back(-1);
        if (rare.active()) reserved_at.push_back(0);
        continue;
      }
      const ClassVerdict* v = i == state::Snapshot::npos ? nullptr : verdict.At(i);
      if (v != nullptr && !v->passes()) v = nullptr;
      bool reserved = false;
      if (rare.active() && v != nullptr) {
        // Whether the hardware could host the rare shape is the node's class's (its key covers
        // the topology), so it is asked once per verdict, not per node.
        std::pair<const ClassVerdict*, bool>& hosts =
            scratch.hosts_rare[(reinterpret_cast<std::uintptr_t>(v) >> 4) % kHostsSlots];
        if (hosts.first != v) hosts = {v, rare.HostsRare(snap.briefs()[i].hardware)};
        reserved = hosts.second && !rare.RunsThePool(n.name);
      }
      if (rare.active()) reserved_at.push_back(reserved);
      if (v != nullptr) band.Offer(v->score100, v->capacity, reserved);
      verdicts.push_back(v);
      if (packs_cpu) {
        const packing::NodeHardware& hw = snap.briefs()[i].hardware;
        idle.push_back(IdleGpuShare(hw, snap.briefs()[i].free_by_vendor));
        for (const int g : hw.gpus) gpu_node_listed = gpu_node_listed || g > 0;
      }
    }
    if (gpu_node_listed) evaluator_.ObserveCpuPod(e);
    for (std::size_t k = 0; k < nodes.size(); ++k) {
      const ClassVerdict* v = verdicts[k];
      const bool reserved = rare.active() && reserved_at[k] != 0;
      std::int64_t score = v != nullptr ? band.ExtenderScore(v->score100, v->capacity, reserved) : 0;
      if (packs_cpu) score = CpuPodScore(static_cast<int>(score), idle[k]);
      scores.push_back({nodes[k].name, score});
    }
    framework::RemnantTie remnants = RemnantTieFor(evaluator_, e.request, snap);
    framework::PreferOneOfTheBest(
        std::span<HostScore>(scores),
        [&](std::size_t k) {
          return TieKeyOf(verdicts[k], order_keys[k] != 0 ? order_keys[k] : NodeOrderKey(scores[k].host),
                          remnants);
        },
        [](HostScore& h) -> std::int64_t& { return h.score; });
    WriteHostPriorityList(resp.body, scores);
    if (metrics::LogEnabled(LogLevel::kDebug)) {
      metrics::Log(LogLevel::kDebug, {"prioritize", pod, ""},
                   "scored " + std::to_string(nodes.size()) + " nodes in " +
                       std::to_string(verdict.evaluated()) + " classes");
    }
    return;
  }

  std::vector<NodeRef>& passed = scratch.passed;
  std::vector<NodeFailure>& failed = scratch.failed;
  std::vector<NodeFailure>& unresolvable = scratch.unresolvable;
  std::vector<std::uint32_t>& passed_at = scratch.passed_at;
  passed.clear();
  failed.clear();
  unresolvable.clear();
  passed_at.clear();
  std::string error;
  scratch.names.clear();
  for (const NodeRef& n : nodes) scratch.names.push_back(n.name);
  snap.IndexOf(scratch.names, scratch.at);
  // The node where the pod holds devices already (a bind that did not complete: the extender
  // restarted, or the Binding's outcome was unknown) fits it on them; bind completes it there.
  // Looked up once, and only when a node fails.
  std::optional<std::string> own;
  auto holds_devices_on = [&](std::string_view node) {
    if (!own) own = evaluator_.store().NodeOfOwnAllocation(e.uid);
    return !own->empty() && *own == node;
  };
  for (std::size_t k = 0; k < nodes.size(); ++k) {
    const NodeRef& n = nodes[k];
    const std::size_t i = scratch.at[k];
    if (i == state::Snapshot::npos) {
      unresolvable.push_back({n.name, Evaluator::kUnknownNode});
      evaluator_.CountUnknownNode();
      continue;
    }
    const ClassVerdict* v = verdict.At(i);
    if (v->passes() || holds_devices_on(n.name)) {
      passed.push_back(n);
      passed_at.push_back(static_cast<std::uint32_t>(i));
      continue;
    }
    if (v->rejections != nullptr) v->rejections->Inc();
    switch (v->code) {
      case Code::kUnschedulableAndUnresolvable:
        unresolvable.push_back({n.name, v->message});
        break;
      case Code::kError:
        error = v->message;
        [[fallthrough]];
      default:
        failed.push_back({n.name, v->message});
        break;
    }
  }
  if (!error.empty()) {
    // kube-scheduler's contract: a plugin error fails the whole call (the pod is retried).
    metrics::Log(LogLevel::kError, {"filter", pod, ""}, error);
    WriteFilterResult(resp.body, nodes_mode, {}, {}, {}, error);
    return;
  }
  WriteFilterResult(resp.body, nodes_mode, passed, failed, unresolvable, "");
  e.set_passed_order(std::make_shared<const std::vector<std::uint32_t>>(passed_at));
  BindHooks* hooks = evaluator_.hooks();
  if (passed.empty() && !nodes.empty() && hooks != nullptr) {
    // No node fits: the pod's owner gets the reasons counted (a FailedScheduling event). Off the
    // hot path: only calls that leave no node pay for the second pass (verdicts are cached).
    const std::set<std::string, std::less<>> stale = hooks->StaleTopologies();
    std::vector<std::pair<std::string, std::size_t>> reasons;
    auto count = [&](std::string_view summary) {
      for (auto& [text, n] : reasons) {
        if (text == summary) return void(++n);
      }
      reasons.emplace_back(std::string(summary), 1);
    };
    for (const NodeRef& n : nodes) {
      const std::size_t i = snap.IndexOf(n.name);
      const ClassVerdict* v = i == state::Snapshot::npos ? nullptr : verdict.At(i);
      std::string_view summary = v == nullptr ? kSummaryNoTopology : std::string_view(v->summary);
      if (summary == kSummaryNoTopology && stale.contains(n.name)) summary = kSummaryStale;
      count(summary);
    }
    hooks->PodUnschedulable(e.pod_namespace, e.pod_name, e.uid,
                            SummarizeRefusals(nodes.size(), 0, std::move(reasons)));
  }
  if (metrics::LogEnabled(LogLevel::kDebug)) {
    metrics::Log(LogLevel::kDebug, {"filter", pod, ""},
                 std::to_string(passed.size()) + " of " + std::to_string(nodes.size()) + " nodes fit (" +
                     std::to_string(verdict.evaluated()) + " node classes evaluated)");
  }
}

void KubeVerbs::Bind(std::string_view body, HttpResponse& resp) {
  Result<BindingArgs> args = ThreadReader().ReadBindingArgs(body);
  if (!args.ok()) return BadRequest(resp, Verb::kBind, args.error());
  WriteBindingResult(resp.body, binder_.Bind(*args));
}

void KubeVerbs::Preempt(std::string_view body, HttpResponse& resp) {
  Result<PreemptionArgsView> args = ThreadReader().ReadPreemptionArgs(body);
  if (!args.ok()) return BadRequest(resp, Verb::kPreempt, args.error());
  Result<std::shared_ptr<PodEntry>> entry = evaluator_.EntryFor(args->pod);
  if (!entry.ok()) return BadRequest(resp, Verb::kPreempt, entry.error());
  const PodEntry& e = **entry;
  const framework::Framework& framework = evaluator_.framework();
  state::ClusterStore& store = evaluator_.store();
  const auto snap = store.snapshot();
  std::vector<NodeVictimsOut> keep;
  keep.reserve(args->nodes.size());
  for (const NodeVictimsView& nv : args->nodes) {
    if (nv.uids.empty()) continue;  // kube-scheduler rejects nodes without victims
    if (!e.interested) {
      keep.push_back({nv.node, nv.uids, nv.num_pdb_violations});
      continue;
    }
    const state::NodeRecord* rec = snap->Find(nv.node);
    if (rec == nullptr) continue;
    // The node as it would be without the victims' devices.
    framework::NodeInfo info = NodeInfoOf(*rec);
    for (std::string_view uid : nv.uids) {
      std::optional<state::PodAllocation> victim = store.FindPod(uid);
      if (!victim || victim->node != rec->name) continue;
      framework::RevertDelta(victim->delta, framework::ShapeOf(info.allocated), info.allocated);
    }
    framework::CycleState cycle = framework.NewCycle(e.request);
    if (framework.RunFilter(cycle, info).ok()) keep.push_back({nv.node, nv.uids, nv.num_pdb_violations});
  }
  WritePreemptionResult(resp.body, keep);
}

}  // namespace toposched::extender
