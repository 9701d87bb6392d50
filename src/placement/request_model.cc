// The PlacementRequest value's own functions (request.h): role and policy names, the llm-d role
// label's values, the shape key memoized placements are shared by. Reading a pod into one is
// request.cc's job.

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "toposched/common/text.h"
#include "toposched/placement/request.h"

namespace toposched {
namespace {

// Length-prefixed, so that no string can imitate a separator.
void AppendString(std::string* out, std::string_view s) {
  *out += std::to_string(s.size());
  *out += ':';
  *out += s;
}

void AppendList(std::string* out, const std::vector<std::string>& items) {
  *out += '[';
  for (const std::string& s : items) AppendString(out, s);
  *out += ']';
}

}  // namespace

std::optional<PodRole> ParseLlmdRole(std::string_view value) {
  if (value == "prefill" || value == "encode-prefill") return PodRole::kPrefill;
  if (value == "decode") return PodRole::kDecode;
  if (value == "prefill-decode" || value == "encode-prefill-decode" || value == "both") return PodRole::kBoth;
  if (value == "encode") return PodRole::kNone;
  return std::nullopt;
}

std::string_view ToString(PodRole r) {
  switch (r) {
    case PodRole::kNone:
      return "none";
    case PodRole::kPrefill:
      return "prefill";
    case PodRole::kDecode:
      return "decode";
    case PodRole::kBoth:
      return "both";
  }
  return "none";
}

std::string_view ToString(PackPolicy p) {
  switch (p) {
    case PackPolicy::kDefault:
      return "default";
    case PackPolicy::kBinpack:
      return "binpack";
    case PackPolicy::kSpread:
      return "spread";
  }
  return "default";
}

std::string PlacementRequest::ShapeKey() const {
  // Every field the engine's choice depends on, in a fixed order; identity, role and pool are
  // left out so that pods of one shape share memoized placements.
  std::string key;
  key.reserve(96);
  key += "g=" + std::to_string(gpus);
  key += ";v=";
  key += ToString(vendor);
  key += ";n=" + std::to_string(rdma_nics);
  key += ";c=";
  key += max_gpu_nic_class ? ToString(*max_gpu_nic_class) : std::string_view("-");
  key += ";np=";
  key += ToString(node_policy);
  key += ";s=" + std::to_string(shared.count) + "," + std::to_string(shared.memory_mib) + "," +
         std::to_string(shared.memory_percent) + "," + std::to_string(shared.cores) + ",";
  key += ToString(shared.gpu_policy);
  key += shared.numa_bind ? ",numa" : ",-";
  key += ";ut=";
  AppendList(&key, shared.use_types);
  key += ";at=";
  AppendList(&key, shared.avoid_types);
  key += ";uu=";
  AppendList(&key, shared.use_uuids);
  key += ";au=";
  AppendList(&key, shared.avoid_uuids);
  return key;
}

bool AnnotationIsTrue(std::string_view value) {
  return AsciiLower(TrimSpace(value)) == "true";
}

}  // namespace toposched
