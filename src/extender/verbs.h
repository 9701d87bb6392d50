#pragma once
// The routes' names and the replies every verb shares (private to the extender): routing,
// metrics and logs name a request by its Verb; an error reply carries the message under the
// key its scheduler reads (kube-scheduler "Error", Volcano "errorMessage").

#include <string>
#include <string_view>

#include "toposched/common/pod_label.h"
#include "toposched/common/status.h"
#include "toposched/metrics/logging.h"
#include "toposched/server/http_server.h"
#include "toposched/wire/wire.h"

namespace toposched::extender {

enum class Verb {
  kFilter,
  kPrioritize,
  kBind,
  kPreempt,
  kPrioritizeCpu,
  kVPredicate,
  kVPrioritize,
  kVAllocate,
  kVDeallocate,
  kVPreemptable,
  kVReclaimable,
  kVSessionOpen,
  kVSessionClose,
  kHealthz,
  kReadyz,
  kMetrics,
  kExplain,
  kNodes,
};
inline constexpr int kVerbCount = static_cast<int>(Verb::kNodes) + 1;

constexpr std::string_view VerbName(Verb v) {
  switch (v) {
    case Verb::kFilter:
      return "filter";
    case Verb::kPrioritize:
      return "prioritize";
    case Verb::kBind:
      return "bind";
    case Verb::kPreempt:
      return "preempt";
    case Verb::kPrioritizeCpu:
      return "prioritize-cpu";
    case Verb::kVPredicate:
      return "volcano/predicate";
    case Verb::kVPrioritize:
      return "volcano/prioritize";
    case Verb::kVAllocate:
      return "volcano/allocate";
    case Verb::kVDeallocate:
      return "volcano/deallocate";
    case Verb::kVPreemptable:
      return "volcano/preemptable";
    case Verb::kVReclaimable:
      return "volcano/reclaimable";
    case Verb::kVSessionOpen:
      return "volcano/onSessionOpen";
    case Verb::kVSessionClose:
      return "volcano/onSessionClose";
    case Verb::kHealthz:
      return "healthz";
    case Verb::kReadyz:
      return "readyz";
    case Verb::kMetrics:
      return "metrics";
    case Verb::kExplain:
      return "explain";
    case Verb::kNodes:
      return "nodes";
  }
  return "unknown";
}

constexpr bool IsVolcano(Verb v) {
  return v >= Verb::kVPredicate && v <= Verb::kVSessionClose;
}
// Read-only routes (GET, HEAD); /explain takes a POSTed Pod too.
constexpr bool IsGet(Verb v) {
  return v >= Verb::kHealthz;
}

using ::toposched::PodLabel;  // common/pod_label.h

// An error reply: `status`, the message under the verb's scheduler's error key.
inline void WriteError(server::HttpResponse& resp, Verb verb, int status, std::string_view message) {
  resp.status = status;
  resp.content_type = "application/json";
  resp.body.clear();
  resp.body.append(IsVolcano(verb) ? "{\"errorMessage\":" : "{\"Error\":");
  AppendJsonString(resp.body, message);
  resp.body.append("}");
}

// A body the reader rejected: 400, so the scheduler treats it as a transport error (it is a
// protocol violation, not a scheduling answer), with the reason in the usual error key.
inline void BadRequest(server::HttpResponse& resp, Verb verb, const Error& error) {
  WriteError(resp, verb, 400, error.message());
  metrics::Log(metrics::LogLevel::kWarn, {VerbName(verb), "", ""}, "bad request: " + error.message());
}

// The request reader of this thread (its parser buffers are reused between calls).
inline WireReader& ThreadReader() {
  thread_local WireReader reader;
  return reader;
}

}  // namespace toposched::extender
