// Volcano's verbs: predicate, prioritize, allocate, deallocate, preemptable, reclaimable and the
// session events (adapters.h).

#include <algorithm>
#include <string>
#include <vector>

#include "adapters.h"
#include "rare_class_rule.h"
#include "toposched/metrics/logging.h"
#include "verbs.h"

namespace toposched::extender {
namespace {

using framework::Code;
using metrics::LogLevel;
using server::HttpResponse;

// Volcano's abstain vote (pkg/scheduler/plugins/util/util.go) and predicate status codes
// (pkg/scheduler/api/types.go).
constexpr int kVoteAbstain = 0;
constexpr int kVolcanoError = 1;
constexpr int kVolcanoUnschedulable = 2;
constexpr int kVolcanoUnresolvable = 3;

}  // namespace

void VolcanoVerbs::Predicate(std::string_view body, HttpResponse& resp) {
  Result<VolcanoPredicateArgs> args = ThreadReader().ReadVolcanoPredicate(body);
  if (!args.ok()) return BadRequest(resp, Verb::kVPredicate, args.error());
  Result<std::shared_ptr<PodEntry>> entry = evaluator_.EntryFor(args->task);
  if (!entry.ok()) {
    WriteVolcanoPredicateResult(resp.body, entry.error().message(), kVolcanoError);
    return;
  }
  PodEntry& e = **entry;
  if (!e.interested) {
    WriteVolcanoPredicateResult(resp.body, "", 0);
    return;
  }
  const auto snap = evaluator_.store().snapshot();
  const state::NodeRecord* rec = snap->Find(args->node_name);
  if (rec == nullptr) {
    evaluator_.CountUnknownNode();
    WriteVolcanoPredicateResult(resp.body, Evaluator::kUnknownNode, kVolcanoUnresolvable);
    return;
  }
  std::optional<framework::CycleState> cycle;
  const auto v = evaluator_.Evaluate(e, cycle, {.record = *rec, .snap = snap, .want = Want::kFilter});
  // A task that holds devices here already (an allocate whose reply was lost, then a restart or
  // a new leader restored it) fits on them; allocate answers it "already bound here". Asked
  // only of a node that fails: the common pass costs no store lookup.
  if (v->passes() || evaluator_.store().NodeOfOwnAllocation(e.uid) == args->node_name) {
    binder_.NoteVolcanoPass();
    WriteVolcanoPredicateResult(resp.body, "", 0);
    return;
  }
  if (v->rejections != nullptr) v->rejections->Inc();
  const int code = v->code == Code::kUnschedulableAndUnresolvable ? kVolcanoUnresolvable
                   : v->code == Code::kError                      ? kVolcanoError
                                                                  : kVolcanoUnschedulable;
  WriteVolcanoPredicateResult(resp.body, v->message, code);
}

void VolcanoVerbs::Prioritize(std::string_view body, HttpResponse& resp) {
  Result<VolcanoPrioritizeArgs> args = ThreadReader().ReadVolcanoPrioritize(body);
  if (!args.ok()) return BadRequest(resp, Verb::kVPrioritize, args.error());
  Result<std::shared_ptr<PodEntry>> entry = evaluator_.EntryFor(args->task);
  std::vector<VolcanoNodeScore> scores;
  scores.reserve(args->node_names.size());
  if (!entry.ok()) {
    // An error here leaves the task without a node this pass (Volcano's PrioritizeNodes):
    // score every node 0 instead and say why in the log.
    metrics::Log(LogLevel::kWarn, {"volcano/prioritize", args->task.uid, ""}, entry.error().message());
    for (std::string_view n : args->node_names) scores.push_back({n, 0});
    WriteVolcanoPrioritizeResult(resp.body, scores, "");
    return;
  }
  PodEntry& e = **entry;
  const auto snap = evaluator_.store().snapshot();
  std::optional<framework::CycleState> cycle;
  // Capacity first, as for kube-scheduler: nodes outside the band score 0, the others at least
  // one weight.
  std::vector<std::shared_ptr<const ClassVerdict>> verdicts;
  verdicts.reserve(args->node_names.size());
  framework::CapacityBand band(evaluator_.framework().CapacityBandWidth());
  // A rare node class last: the nodes kept for a rarer shape score 0 while another node fits.
  const framework::RareClass rare =
      RareClassFor(evaluator_.framework(), e.request, e.mix.get(), *snap, &evaluator_.store());
  std::vector<char> reserved;
  reserved.reserve(args->node_names.size());
  for (std::string_view n : args->node_names) {
    std::shared_ptr<const ClassVerdict> v;
    bool kept = false;
    if (e.interested) {
      if (const state::NodeRecord* rec = snap->Find(n)) {
        v = evaluator_.Evaluate(e, cycle, {.record = *rec, .snap = snap, .want = Want::kScores});
        if (!v->passes()) v = nullptr;
        kept = v != nullptr && rare.active() && rare.Reserved(rec->hardware, n);
      }
    }
    if (v != nullptr) band.Offer(v->score100, v->capacity, kept);
    verdicts.push_back(std::move(v));
    reserved.push_back(kept);
  }
  for (std::size_t k = 0; k < args->node_names.size(); ++k) {
    double score = 0;
    if (const auto& v = verdicts[k]; v != nullptr && band.In(v->capacity, reserved[k] != 0)) {
      score = std::max(1, v->score100) * score_weight_;
    }
    scores.push_back({args->node_names[k], score});
  }
  // One node of the best: Volcano too draws at random among its best nodes (pkg/scheduler/util/
  // scheduler_helper.go, SelectBestNodeAndScore: rand.Intn over the nodes of the highest score).
  // Half a total point behind keeps the others above every node a point below.
  framework::RemnantTie remnants = RemnantTieFor(evaluator_, e.request, *snap);
  framework::PreferOneOfTheBest(
      std::span<VolcanoNodeScore>(scores),
      [&](std::size_t k) { return TieKeyOf(verdicts[k].get(), NodeOrderKey(scores[k].node), remnants); },
      [](VolcanoNodeScore& s) -> double& { return s.score; }, score_weight_ / 2);
  WriteVolcanoPrioritizeResult(resp.body, scores, "");
}

void VolcanoVerbs::Allocate(std::string_view body, HttpResponse& resp) {
  Result<VolcanoEventArgs> args = ThreadReader().ReadVolcanoEvent(body);
  if (!args.ok()) return BadRequest(resp, Verb::kVAllocate, args.error());
  WriteVolcanoEventResult(resp.body, binder_.Allocate(args->task));
}

void VolcanoVerbs::Deallocate(std::string_view body, HttpResponse& resp) {
  Result<VolcanoEventArgs> args = ThreadReader().ReadVolcanoEvent(body);
  if (!args.ok()) return BadRequest(resp, Verb::kVDeallocate, args.error());
  WriteVolcanoEventResult(resp.body, binder_.Deallocate(args->task.uid));
}

void VolcanoVerbs::Evictable(std::string_view body, HttpResponse& resp, Verb verb) {
  Result<VolcanoEvictArgs> args = ThreadReader().ReadVolcanoEvict(body);
  if (!args.ok()) return BadRequest(resp, verb, args.error());
  // Always abstain. Volcano asks the plugins tier by tier and the first tier that names victims
  // decides (framework/session_plugins.go, Preemptable/Reclaimable); a later tier is asked only
  // when the earlier ones named none, as the priority plugin does for a preemptor of equal or
  // lower priority. An extender in a later tier that permits victims then makes Volcano evict
  // pods its own policy just refused to (docs/extender.md, "What each verb does", names the
  // Volcano release and e2e test that show it). toposched has no say on who may be evicted: the victims'
  // devices are freed when the pods are gone, and allocate gives them out only then.
  WriteVolcanoEvictResult(resp.body, kVoteAbstain, {});
}

void VolcanoVerbs::SessionOpen(std::string_view body, HttpResponse& resp) {
  Result<VolcanoSessionArgs> args = ThreadReader().ReadVolcanoSession(body);
  if (!args.ok()) return BadRequest(resp, Verb::kVSessionOpen, args.error());
  if (metrics::LogEnabled(LogLevel::kDebug)) {
    metrics::Log(LogLevel::kDebug, {"volcano/onSessionOpen", "", ""},
                 "session: " + std::to_string(args->jobs) + " jobs, " + std::to_string(args->nodes) +
                     " nodes, " + std::to_string(args->queues) + " queues");
  }
  resp.body = "{}";
}

void VolcanoVerbs::SessionClose(HttpResponse& resp) {
  resp.body = "{}";
}

}  // namespace toposched::extender
