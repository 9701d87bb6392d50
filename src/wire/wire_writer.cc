// The reply writers: JSON appended straight into the response body, in the key order and with the
// key names of the upstream Go structs (kubernetes staging/src/k8s.io/kube-scheduler/extender/v1/
// types.go; volcano-sh/volcano pkg/scheduler/plugins/extender/argument.go), so the bytes match
// what Go's encoding/json would produce for the same values. No DOM, no intermediate strings.

#include <charconv>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "toposched/common/json_string.h"
#include "toposched/wire/wire.h"

namespace toposched::extender {
namespace {

void AppendInt(std::string& out, std::int64_t v) {
  char buf[24];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  out.append(buf, r.ptr);
}

// Shortest text that reads back as the same double. JSON has no NaN or infinity; scores are
// finite by construction, so a non-finite one is a bug upstream of here and is written as 0
// rather than producing a reply Volcano cannot decode.
void AppendDouble(std::string& out, double v) {
  if (!std::isfinite(v)) {
    out.push_back('0');
    return;
  }
  char buf[32];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  out.append(buf, r.ptr);
}

// {"name": "message", ...}
void AppendFailedNodes(std::string& out, std::span<const NodeFailure> failures) {
  out.push_back('{');
  bool first = true;
  for (const NodeFailure& f : failures) {
    if (!first) out.push_back(',');
    first = false;
    AppendJsonString(out, f.node);
    out.push_back(':');
    AppendJsonString(out, f.message);
  }
  out.push_back('}');
}

}  // namespace

void WriteFilterResult(std::string& out, bool nodes_mode, std::span<const NodeRef> passed,
                       std::span<const NodeFailure> failed, std::span<const NodeFailure> unresolvable,
                       std::string_view error) {
  const bool ok = error.empty();
  out.append("{\"Nodes\":");
  if (ok && nodes_mode) {
    out.append("{\"items\":[");
    bool first = true;
    for (const NodeRef& n : passed) {
      if (!first) out.push_back(',');
      first = false;
      if (!n.raw.empty()) {
        out.append(n.raw);
      } else {  // a name without its object: still a valid v1.Node, so the reply stays JSON
        out.append("{\"metadata\":{\"name\":");
        AppendJsonString(out, n.name);
        out.append("}}");
      }
    }
    out.append("]}");
  } else {
    out.append("null");
  }
  out.append(",\"NodeNames\":");
  if (ok && !nodes_mode) {
    out.push_back('[');
    bool first = true;
    for (const NodeRef& n : passed) {
      if (!first) out.push_back(',');
      first = false;
      AppendJsonString(out, n.name);
    }
    out.push_back(']');
  } else {
    out.append("null");
  }
  out.append(",\"FailedNodes\":");
  AppendFailedNodes(out, ok ? failed : std::span<const NodeFailure>{});
  out.append(",\"FailedAndUnresolvableNodes\":");
  AppendFailedNodes(out, ok ? unresolvable : std::span<const NodeFailure>{});
  out.append(",\"Error\":");
  AppendJsonString(out, error);
  out.push_back('}');
}

void WriteHostPriorityList(std::string& out, std::span<const HostScore> scores) {
  out.push_back('[');
  bool first = true;
  for (const HostScore& s : scores) {
    if (!first) out.push_back(',');
    first = false;
    out.append("{\"Host\":");
    AppendJsonString(out, s.host);
    out.append(",\"Score\":");
    AppendInt(out, s.score);
    out.push_back('}');
  }
  out.push_back(']');
}

void WriteBindingResult(std::string& out, std::string_view error) {
  out.append("{\"Error\":");
  AppendJsonString(out, error);
  out.push_back('}');
}

void WritePreemptionResult(std::string& out, std::span<const NodeVictimsOut> nodes) {
  out.append("{\"NodeNameToMetaVictims\":{");
  bool first_node = true;
  for (const NodeVictimsOut& n : nodes) {
    if (!first_node) out.push_back(',');
    first_node = false;
    AppendJsonString(out, n.node);
    out.append(":{\"Pods\":[");
    bool first_pod = true;
    for (std::string_view uid : n.uids) {
      if (!first_pod) out.push_back(',');
      first_pod = false;
      out.append("{\"UID\":");
      AppendJsonString(out, uid);
      out.push_back('}');
    }
    out.append("],\"NumPDBViolations\":");
    AppendInt(out, n.num_pdb_violations);
    out.push_back('}');
  }
  out.append("}}");
}

void WriteVolcanoPredicateResult(std::string& out, std::string_view message, int code) {
  out.append("{\"status\":");
  AppendJsonString(out, message);
  out.append(",\"code\":");
  AppendInt(out, code);
  out.push_back('}');
}

void WriteVolcanoPrioritizeResult(std::string& out, std::span<const VolcanoNodeScore> scores,
                                  std::string_view error) {
  out.append("{\"nodeScore\":{");
  bool first = true;
  for (const VolcanoNodeScore& s : scores) {
    if (!first) out.push_back(',');
    first = false;
    AppendJsonString(out, s.node);
    out.push_back(':');
    AppendDouble(out, s.score);
  }
  out.append("},\"errorMessage\":");
  AppendJsonString(out, error);
  out.push_back('}');
}

void WriteVolcanoEventResult(std::string& out, std::string_view error) {
  out.append("{\"errorMessage\":");
  AppendJsonString(out, error);
  out.push_back('}');
}

void WriteVolcanoEvictResult(std::string& out, int vote, std::span<const std::string_view> raw_victims) {
  out.append("{\"status\":");
  AppendInt(out, vote);
  out.append(",\"victims\":[");
  bool first = true;
  for (std::string_view raw : raw_victims) {
    // An empty text is no TaskInfo; writing null would hand Volcano a nil victim to dereference.
    if (raw.empty()) continue;
    if (!first) out.push_back(',');
    first = false;
    out.append(raw);
  }
  out.append("]}");
}

}  // namespace toposched::extender
