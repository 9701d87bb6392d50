#pragma once
// What the codecs of objects.h share, private to toposched_kube_objects: bounded JSON parsing,
// typed readers that name the JSON path of a problem, small text helpers, and the devices of an
// allocation as the encoders walk them. The codecs: allocation_codec.cc (toposched.io/allocation),
// hami_codec.cc (HAMi's annotations), objects.cc (Node, Pod and NodeTopology objects).

#include <algorithm>
#include <cctype>
#include <charconv>
#include <climits>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "../common/json_errors.h"
#include "../common/json_read.h"
#include "toposched/common/status.h"
#include "toposched/common/text.h"
#include "toposched/kube/objects.h"
#include "toposched/placement/placement.h"
#include "toposched/topology/node_topology.h"

namespace toposched::kube::objects_internal {

using json = nlohmann::json;
using ordered_json = nlohmann::ordered_json;

// Annotations are small; anything near this is not ours (the API server caps all annotations of
// an object at 256 KiB together).
inline constexpr std::size_t kMaxAnnotationBytes = 1u << 20;
// toposched.io/allocation is at most four levels deep; a bound keeps nlohmann's recursive
// destructor and the readers away from hostile nesting.
inline constexpr int kMaxAllocationDepth = 16;

// ---- small helpers ----

using json_errors::Expected;
using json_errors::Quote;

using json_read::Child;
using json_read::Element;

// A decimal integer, optionally signed ("+" too), nothing else: Go's strconv.Atoi, which HAMi
// reads these fields with (common/text.h's ParseInt refuses "+", as the command line does).
template <typename T>
inline std::optional<T> ParseInt(std::string_view s) {
  if (s.size() > 1 && s.front() == '+' && s[1] != '-') s.remove_prefix(1);
  T value{};
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
  if (s.empty() || ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
  return value;
}

inline std::string Upper(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return out;
}

// Percent of a GPU's SMs from hundredths of a percent, rounded up (HAMi takes whole percents;
// rounding down could promise less compute than the engine reserved).
inline int CoresPercent(std::int64_t cores) {
  if (cores <= 0) return 0;
  const std::int64_t percent = cores / 100 + (cores % 100 != 0 ? 1 : 0);
  return static_cast<int>(std::min<std::int64_t>(percent, INT_MAX));
}

// Deepest nesting of brackets outside strings; stops counting past `limit`.
inline int NestingDepth(std::string_view text, int limit) {
  int depth = 0, max_depth = 0;
  bool in_string = false, escaped = false;
  for (char c : text) {
    if (in_string) {
      if (escaped)
        escaped = false;
      else if (c == '\\')
        escaped = true;
      else if (c == '"')
        in_string = false;
      continue;
    }
    if (c == '"')
      in_string = true;
    else if (c == '[' || c == '{')
      max_depth = std::max(max_depth, ++depth);
    else if (c == ']' || c == '}')
      --depth;
    if (max_depth > limit) break;
  }
  return max_depth;
}

// Parses a bounded JSON document without letting exceptions out.
inline Result<json> ParseBoundedJson(std::string_view text, int max_depth) {
  if (text.size() > kMaxAnnotationBytes) {
    return Error("value is " + std::to_string(text.size()) + " bytes, over the limit of " +
                 std::to_string(kMaxAnnotationBytes));
  }
  if (NestingDepth(text, max_depth) > max_depth) {
    return Error("not valid JSON: nested deeper than " + std::to_string(max_depth) + " levels");
  }
  try {
    return json::parse(text.begin(), text.end());
  } catch (const json::exception& e) {
    return Error(std::string("not valid JSON: ") + e.what());
  }
}

// ---- typed readers (common/json_read.h): API objects and HAMi's annotations are written by Go,
// whose encoding/json reads a JSON null member as absent ----

// This library's own Presence, so that argument-dependent lookup does not also find the
// json_read readers these wrap.
enum class Presence { kRequired, kOptional };
inline json_read::Presence Common(Presence p) {
  return p == Presence::kRequired ? json_read::Presence::kRequired : json_read::Presence::kOptional;
}

inline Result<const json*> Member(const json& o, std::string_view key, const std::string& path,
                                  Presence presence) {
  return json_read::Member(o, key, path, Common(presence), json_read::Null::kAbsent);
}
inline Status ReadString(const json& o, std::string_view key, const std::string& path, Presence presence,
                         std::string* out) {
  return json_read::ReadString(o, key, path, Common(presence), out, json_read::Null::kAbsent);
}
template <typename T>
Status ReadInt(const json& o, std::string_view key, const std::string& path, Presence presence, T min, T max,
               T* out) {
  return json_read::ReadInt(o, key, path, Common(presence), min, max, out, json_read::Null::kAbsent);
}
inline Status ReadBool(const json& o, std::string_view key, const std::string& path, bool* out) {
  return json_read::ReadBool(o, key, path, json_read::Presence::kOptional, out, json_read::Null::kAbsent);
}
inline Result<const json*> ReadObject(const json& o, std::string_view key, const std::string& path,
                                      Presence presence) {
  return json_read::ReadObject(o, key, path, Common(presence), json_read::Null::kAbsent);
}
inline Result<const json*> ReadArray(const json& o, std::string_view key, const std::string& path,
                                     Presence presence) {
  return json_read::ReadArray(o, key, path, Common(presence), json_read::Null::kAbsent);
}
inline Status ReadStringMap(const json& o, std::string_view key, const std::string& path,
                            bool (*keep)(const std::string&), std::map<std::string, std::string>* out) {
  return json_read::ReadStringMap(o, key, path, keep, out, json_read::Null::kAbsent);
}

// ---- devices of an allocation ----

inline bool ValidGpu(const NodeTopology& t, int g) {
  return g >= 0 && g < static_cast<int>(t.gpus.size());
}
inline bool ValidNic(const NodeTopology& t, int n) {
  return n >= 0 && n < static_cast<int>(t.nics.size());
}

struct ChosenGpu {
  int index = 0;
  std::optional<GpuShareUsage> share;  // null: whole GPU
};

// The delta's GPUs in delta order (whole, then shared); indices the topology lacks are skipped
// (the store never publishes such a delta; an encoder has no error channel).
inline std::vector<ChosenGpu> ChosenGpus(const framework::AllocationDelta& delta, const NodeTopology& t) {
  std::vector<ChosenGpu> out;
  for (int g : delta.exclusive_gpus) {
    if (ValidGpu(t, g)) out.push_back({g, std::nullopt});
  }
  for (const auto& [g, usage] : delta.shares) {
    if (ValidGpu(t, g)) out.push_back({g, usage});
  }
  return out;
}

inline std::vector<int> ChosenNics(const framework::AllocationDelta& delta, const NodeTopology& t) {
  std::vector<int> out;
  for (int n : delta.nics) {
    if (ValidNic(t, n)) out.push_back(n);
  }
  return out;
}

// Matrix cells, falling back to the path rules when a matrix does not have the cell.
inline Link GpuNicLink(const NodeTopology& t, int g, int n) {
  if (t.gpu_nic.rows == static_cast<int>(t.gpus.size()) &&
      t.gpu_nic.cols == static_cast<int>(t.nics.size())) {
    return t.gpu_nic.at(g, n);
  }
  return Link{
      ClassifyPath(t, t.gpus[static_cast<std::size_t>(g)].parent, t.gpus[static_cast<std::size_t>(g)].numa,
                   t.nics[static_cast<std::size_t>(n)].parent, t.nics[static_cast<std::size_t>(n)].numa),
      Fabric::kNone, 0};
}

inline Link GpuGpuLink(const NodeTopology& t, int a, int b) {
  if (t.gpu_gpu.rows == static_cast<int>(t.gpus.size()) && t.gpu_gpu.cols == t.gpu_gpu.rows) {
    return t.gpu_gpu.at(a, b);
  }
  const Gpu& ga = t.gpus[static_cast<std::size_t>(a)];
  const Gpu& gb = t.gpus[static_cast<std::size_t>(b)];
  return Link{ClassifyPath(t, ga.parent, ga.numa, gb.parent, gb.numa), Fabric::kNone, 0};
}

// Worse-than order of links: by LinkRank, then (NVLink) fewer bonded links.
inline bool WorseLink(const Link& a, int rank_a, const Link& b, int rank_b) {
  if (rank_a != rank_b) return rank_a > rank_b;
  return a.cls == LinkClass::kNV && b.cls == LinkClass::kNV && a.count < b.count;
}

// HAMi's vendor word for NVIDIA is "NVIDIA" (protocols.md §3.4); AMD's records carry the
// registered type instead (HamiAmdCard::type).
inline constexpr std::string_view kHamiNvidiaType = "NVIDIA";
// The type HAMi's AMD scheduler writes when the registration gives none (device.go Fit: the
// request's type, AMDDevice = "AMD").
inline constexpr std::string_view kHamiAmdType = "AMD";

}  // namespace toposched::kube::objects_internal
