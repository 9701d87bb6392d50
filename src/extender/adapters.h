#pragma once
// The schedulers' adapters (private to the extender): each verb decodes its body
// (wire.h's WireReader), asks the evaluator or the binder, and encodes the reply in its
// scheduler's shape. No scheduling decision is made here.

#include <string_view>

#include "binder.h"
#include "evaluator.h"
#include "toposched/server/http_server.h"
#include "verbs.h"

namespace toposched::extender {

// kube-scheduler's extender verbs (k8s.io/kube-scheduler/extender/v1).
class KubeVerbs {
 public:
  KubeVerbs(Evaluator& evaluator, Binder& binder) : evaluator_(evaluator), binder_(binder) {}
  // filter (Want::kFilter) and prioritize (Want::kScores); `device_free_only`: prioritize-cpu,
  // which scores only the pods that ask no device (PodEntry::packs_cpu) and names no host for
  // the others.
  void FilterOrPrioritize(std::string_view body, server::HttpResponse& resp, Want want,
                          bool device_free_only = false);
  void Bind(std::string_view body, server::HttpResponse& resp);
  void Preempt(std::string_view body, server::HttpResponse& resp);

 private:
  Evaluator& evaluator_;
  Binder& binder_;
};

// Volcano's extender plugin's verbs (volcano-sh/volcano pkg/scheduler/plugins/extender).
class VolcanoVerbs {
 public:
  // `score_weight`: ExtenderOptions::volcano_score_weight.
  VolcanoVerbs(Evaluator& evaluator, Binder& binder, double score_weight)
      : evaluator_(evaluator), binder_(binder), score_weight_(score_weight) {}
  void Predicate(std::string_view body, server::HttpResponse& resp);
  void Prioritize(std::string_view body, server::HttpResponse& resp);
  void Allocate(std::string_view body, server::HttpResponse& resp);
  void Deallocate(std::string_view body, server::HttpResponse& resp);
  // preemptable and reclaimable (`verb` names which, for errors).
  void Evictable(std::string_view body, server::HttpResponse& resp, Verb verb);
  void SessionOpen(std::string_view body, server::HttpResponse& resp);
  void SessionClose(server::HttpResponse& resp);

 private:
  Evaluator& evaluator_;
  Binder& binder_;
  const double score_weight_;
};

}  // namespace toposched::extender
