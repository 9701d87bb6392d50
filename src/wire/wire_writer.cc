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

#include "toposched/extender/wire.h"

namespace toposched::extender {
namespace {

// Length of the well-formed UTF-8 sequence starting at s[i] (a byte >= 0x80), or 0 when the
// bytes there are not one (Unicode Table 3-7: no overlong forms, no surrogates, <= U+10FFFF).
std::size_t Utf8SequenceLength(std::string_view s, std::size_t i) {
  const auto byte = [&](std::size_t k) { return static_cast<unsigned char>(s[k]); };
  const auto in = [&](std::size_t k, unsigned lo, unsigned hi) {
    return k < s.size() && byte(k) >= lo && byte(k) <= hi;
  };
  const unsigned b0 = byte(i);
  if (b0 >= 0xC2 && b0 <= 0xDF) return in(i + 1, 0x80, 0xBF) ? 2 : 0;
  if (b0 >= 0xE0 && b0 <= 0xEF) {
    const unsigned lo = b0 == 0xE0 ? 0xA0 : 0x80;
    const unsigned hi = b0 == 0xED ? 0x9F : 0xBF;
    return in(i + 1, lo, hi) && in(i + 2, 0x80, 0xBF) ? 3 : 0;
  }
  if (b0 >= 0xF0 && b0 <= 0xF4) {
    const unsigned lo = b0 == 0xF0 ? 0x90 : 0x80;
    const unsigned hi = b0 == 0xF4 ? 0x8F : 0xBF;
    return in(i + 1, lo, hi) && in(i + 2, 0x80, 0xBF) && in(i + 3, 0x80, 0xBF) ? 4 : 0;
  }
  return 0;
}

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

void AppendJsonString(std::string& out, std::string_view s) {
  static constexpr char kHex[] = "0123456789abcdef";
  out.reserve(out.size() + s.size() + 2);
  out.push_back('"');
  std::size_t run = 0;  // start of the bytes not yet copied
  std::size_t i = 0;
  const auto flush = [&] { out.append(s.data() + run, i - run); };
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c != '"' && c != '\\' && c < 0x80) {
      ++i;
      continue;
    }
    if (c >= 0x80) {
      if (const std::size_t n = Utf8SequenceLength(s, i); n != 0) {
        i += n;
        continue;
      }
      flush();
      out.append("\\ufffd");  // one per invalid byte, as Go's encoder does
      run = ++i;
      continue;
    }
    flush();
    switch (c) {
      case '"':
        out.append("\\\"");
        break;
      case '\\':
        out.append("\\\\");
        break;
      case '\n':
        out.append("\\n");
        break;
      case '\r':
        out.append("\\r");
        break;
      case '\t':
        out.append("\\t");
        break;
      case '\b':
        out.append("\\b");
        break;
      case '\f':
        out.append("\\f");
        break;
      default:
        out.append("\\u00");
        out.push_back(kHex[c >> 4]);
        out.push_back(kHex[c & 0xF]);
    }
    run = ++i;
  }
  flush();
  out.push_back('"');
}

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
