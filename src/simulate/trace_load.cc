// Trace loading (trace.h): the Alibaba GPU trace's CSV files read into nodes and tasks, the
// variants of a directory, each node's machine shape, and the FGD paper's published figures.
// The replay is in trace.cc.

#include "toposched/simulate/trace.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>
#include <random>
#include <utility>

#include "simulate_internal.h"
#include "toposched/common/file.h"
#include "toposched/placement/packing.h"
#include "trace_internal.h"

namespace toposched::simulate {
namespace {

using packing::kMilli;

// ------------------------------------------------------------------------------------------
// CSV

std::vector<std::string_view> SplitFields(std::string_view line) {
  std::vector<std::string_view> out;
  std::size_t start = 0;
  for (std::size_t i = 0; i <= line.size(); ++i) {
    if (i == line.size() || line[i] == ',') {
      out.push_back(line.substr(start, i - start));
      start = i + 1;
    }
  }
  return out;
}

struct Table {
  std::vector<std::string> header;
  std::vector<std::pair<int, std::vector<std::string_view>>> rows;  // line number, fields
};

Result<Table> ReadTable(std::string_view csv) {
  if (csv.size() > kMaxTraceFileBytes) {
    return Error("larger than " + std::to_string(kMaxTraceFileBytes >> 20) + " MiB");
  }
  Table t;
  int line_no = 0;
  std::size_t pos = 0;
  while (pos < csv.size()) {
    std::size_t end = csv.find('\n', pos);
    if (end == std::string_view::npos) end = csv.size();
    std::string_view line = csv.substr(pos, end - pos);
    pos = end + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty()) continue;
    std::vector<std::string_view> fields = SplitFields(line);
    if (t.header.empty()) {
      for (std::string_view f : fields) t.header.emplace_back(f);
      continue;
    }
    if (fields.size() != t.header.size()) {
      return Error("line " + std::to_string(line_no) + ": " + std::to_string(fields.size()) +
                   " fields where the header has " + std::to_string(t.header.size()));
    }
    t.rows.emplace_back(line_no, std::move(fields));
  }
  if (t.header.empty()) return Error("empty file: no header line");
  return t;
}

Result<std::size_t> Column(const Table& t, std::string_view name) {
  for (std::size_t i = 0; i < t.header.size(); ++i) {
    if (t.header[i] == name) return i;
  }
  std::string have;
  for (const std::string& h : t.header) have += (have.empty() ? "" : ",") + h;
  return Error("no column \"" + std::string(name) + "\" in the header (" + have + ")");
}

std::optional<std::size_t> OptionalColumn(const Table& t, std::string_view name) {
  for (std::size_t i = 0; i < t.header.size(); ++i) {
    if (t.header[i] == name) return i;
  }
  return std::nullopt;
}

Result<std::int64_t> Int(std::string_view s, std::int64_t lo, std::int64_t hi, int line,
                         std::string_view column) {
  std::int64_t v = 0;
  bool ok = !s.empty() && s.size() <= 18;
  for (char c : s) {
    if (c < '0' || c > '9') ok = false;
    if (ok) v = v * 10 + (c - '0');
  }
  if (!ok || v < lo || v > hi) {
    return Error("line " + std::to_string(line) + ", " + std::string(column) + ": \"" + std::string(s) +
                 "\" is not an integer in " + std::to_string(lo) + ".." + std::to_string(hi));
  }
  return v;
}

bool ValidName(std::string_view s) {
  if (s.empty() || s.size() > 253) return false;
  return std::all_of(s.begin(), s.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
           c == '_' || c == '.';
  });
}

}  // namespace

Result<std::vector<TraceNode>> ParseTraceNodes(std::string_view csv) {
  TOPOSCHED_ASSIGN_OR_RETURN(const Table t, ReadTable(csv));
  auto sn = Column(t, "sn");
  auto cpu = Column(t, "cpu_milli");
  auto mem = Column(t, "memory_mib");
  auto gpu = Column(t, "gpu");
  auto model = Column(t, "model");
  for (const auto* c : {&sn, &cpu, &mem, &gpu, &model}) {
    if (!c->ok()) return c->error();
  }
  std::vector<TraceNode> nodes;
  for (const auto& [line, f] : t.rows) {
    TraceNode n;
    n.name = std::string(f[*sn]);
    if (!ValidName(n.name))
      return Error("line " + std::to_string(line) + ", sn: \"" + n.name + "\" is not a node name");
    auto c = Int(f[*cpu], 1, 100'000'000, line, "cpu_milli");
    auto m = Int(f[*mem], 0, 1'000'000'000, line, "memory_mib");
    auto g = Int(f[*gpu], 0, kMaxTraceGpusPerNode, line, "gpu");
    for (const auto* r : {&c, &m, &g}) {
      if (!r->ok()) return r->error();
    }
    n.cpu_milli = *c;
    n.memory_mib = *m;
    n.gpus = static_cast<int>(*g);
    n.model = std::string(f[*model]);
    if (n.gpus > 0 && !ValidName(n.model)) {
      return Error("line " + std::to_string(line) + ", model: \"" + n.model + "\" is not a GPU model name");
    }
    nodes.push_back(std::move(n));
  }
  if (nodes.empty()) return Error("no nodes");
  return nodes;
}

Result<std::vector<TraceTask>> ParseTraceTasks(std::string_view csv) {
  TOPOSCHED_ASSIGN_OR_RETURN(const Table t, ReadTable(csv));
  auto name = Column(t, "name");
  auto cpu = Column(t, "cpu_milli");
  auto mem = Column(t, "memory_mib");
  auto num = Column(t, "num_gpu");
  auto milli = Column(t, "gpu_milli");
  for (const auto* c : {&name, &cpu, &mem, &num, &milli}) {
    if (!c->ok()) return c->error();
  }
  const std::optional<std::size_t> spec = OptionalColumn(t, "gpu_spec");
  const std::optional<std::size_t> created = OptionalColumn(t, "creation_time");
  std::vector<TraceTask> tasks;
  for (const auto& [line, f] : t.rows) {
    TraceTask task;
    task.name = std::string(f[*name]);
    if (!ValidName(task.name)) {
      return Error("line " + std::to_string(line) + ", name: \"" + task.name + "\" is not a pod name");
    }
    auto c = Int(f[*cpu], 0, 100'000'000, line, "cpu_milli");
    auto m = Int(f[*mem], 0, 1'000'000'000, line, "memory_mib");
    auto g = Int(f[*num], 0, kMaxTraceGpusPerNode, line, "num_gpu");
    auto gm = Int(f[*milli], 0, kMilli, line, "gpu_milli");
    for (const auto* r : {&c, &m, &g, &gm}) {
      if (!r->ok()) return r->error();
    }
    task.cpu_milli = *c;
    task.memory_mib = *m;
    task.gpus = static_cast<int>(*g);
    task.gpu_milli = static_cast<int>(*gm);
    if (task.gpus == 0 && task.gpu_milli != 0) {
      return Error("line " + std::to_string(line) + ": gpu_milli " + std::to_string(task.gpu_milli) +
                   " without num_gpu");
    }
    if (task.gpus > 0 && task.gpu_milli == 0) {
      return Error("line " + std::to_string(line) + ": num_gpu " + std::to_string(task.gpus) +
                   " with gpu_milli 0");
    }
    if (task.gpus > 1 && task.gpu_milli != kMilli) {
      return Error("line " + std::to_string(line) + ": " + std::to_string(task.gpus) +
                   " GPUs must be whole (gpu_milli 1000), not " + std::to_string(task.gpu_milli));
    }
    if (spec && !f[*spec].empty()) {
      std::string_view s = f[*spec];
      std::size_t start = 0;
      for (std::size_t i = 0; i <= s.size(); ++i) {
        if (i == s.size() || s[i] == '|') {
          const std::string_view m1 = s.substr(start, i - start);
          if (!ValidName(m1)) {
            return Error("line " + std::to_string(line) + ", gpu_spec: \"" + std::string(s) +
                         "\" is not a list of models");
          }
          task.gpu_spec.emplace_back(m1);
          start = i + 1;
        }
      }
    }
    if (created) {
      TOPOSCHED_ASSIGN_OR_RETURN(const std::int64_t creation_s,
                                 Int(f[*created], 0, 1'000'000'000'000, line, "creation_time"));
      task.creation_s = static_cast<double>(creation_s);
    }
    tasks.push_back(std::move(task));
  }
  if (tasks.empty()) return Error("no tasks");
  std::stable_sort(tasks.begin(), tasks.end(), [](const TraceTask& a, const TraceTask& b) {
    return a.creation_s != b.creation_s ? a.creation_s < b.creation_s : a.name < b.name;
  });
  return tasks;
}

std::int64_t Trace::GpuCapacityMilli() const {
  std::int64_t total = 0;
  for (const TraceNode& n : nodes) total += static_cast<std::int64_t>(n.gpus) * kMilli;
  return total;
}

Result<Trace> LoadTrace(const std::string& dir, const std::string& variant) {
  if (!ValidName(variant)) return Error("trace variant \"" + variant + "\" is not a name");
  Trace trace;
  trace.variant = variant;
  const std::string node_path = dir + "/openb_node_list_gpu_node.csv";
  TOPOSCHED_ASSIGN_OR_RETURN_CTX(const std::string node_csv, ReadFileBounded(node_path, kMaxTraceFileBytes),
                                 node_path);
  TOPOSCHED_ASSIGN_OR_RETURN_CTX(trace.nodes, ParseTraceNodes(node_csv), node_path);
  const std::string pod_path = dir + "/openb_pod_list_" + variant + ".csv";
  TOPOSCHED_ASSIGN_OR_RETURN_CTX(const std::string pod_csv, ReadFileBounded(pod_path, kMaxTraceFileBytes),
                                 pod_path);
  TOPOSCHED_ASSIGN_OR_RETURN_CTX(trace.tasks, ParseTraceTasks(pod_csv), pod_path);
  return trace;
}

std::vector<std::string> TraceVariants(const std::string& dir) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    const std::string prefix = "openb_pod_list_", suffix = ".csv";
    if (name.size() > prefix.size() + suffix.size() && name.rfind(prefix, 0) == 0 &&
        name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0) {
      out.push_back(name.substr(prefix.size(), name.size() - prefix.size() - suffix.size()));
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

namespace {

// Appends to `out` tasks drawn uniformly with replacement from `pool` (the index is the draw
// modulo the count) while the total requested GPU is below ratio x capacity.
void AppendTuningDraws(std::vector<TraceTask>& out, const std::vector<TraceTask>& pool,
                       std::int64_t capacity_milli, double ratio, std::mt19937& rng) {
  if (pool.empty()) return;
  double requested = 0;
  bool any_gpu = false;
  for (const TraceTask& t : pool) any_gpu = any_gpu || t.GpuMilli() > 0;
  if (!any_gpu) return;
  for (const TraceTask& t : out) requested += static_cast<double>(t.GpuMilli());
  const double target = ratio * static_cast<double>(capacity_milli);
  while (requested < target) {
    const TraceTask& pick = pool[rng() % pool.size()];
    out.push_back(pick);
    out.back().name += "-t" + std::to_string(out.size());
    requested += static_cast<double>(pick.GpuMilli());
  }
}

// Fisher-Yates, from the back (as Go's rand.Shuffle).
template <typename T>
void Shuffle(std::vector<T>& v, std::mt19937& rng) {
  for (std::size_t i = v.size(); i > 1; --i) std::swap(v[i - 1], v[rng() % i]);
}

}  // namespace

std::vector<TraceTask> TuneTasks(const std::vector<TraceTask>& tasks, std::int64_t capacity_milli,
                                 double ratio, std::uint32_t seed) {
  std::vector<TraceTask> out = tasks;
  std::mt19937 rng(seed);
  AppendTuningDraws(out, tasks, capacity_milli, ratio, rng);
  return out;
}

TraceWorkload PrepareWorkload(const Trace& trace, double tune_ratio, std::uint32_t seed, bool shuffle) {
  TraceWorkload w;
  std::mt19937& rng = w.rng;
  rng.seed(seed);
  w.tasks = trace.tasks;
  if (shuffle) {
    std::stable_sort(w.tasks.begin(), w.tasks.end(),
                     [](const TraceTask& a, const TraceTask& b) { return a.name < b.name; });
    Shuffle(w.tasks, rng);
  }
  AppendTuningDraws(w.tasks, trace.tasks, trace.GpuCapacityMilli(), tune_ratio, rng);
  // The simulator sorts the nodes by name and prefixes the i-th with perm[i]; the trace's names
  // are unique, so the rank of a node is perm[its place in name order].
  std::vector<std::size_t> by_name(trace.nodes.size());
  for (std::size_t i = 0; i < by_name.size(); ++i) by_name[i] = i;
  std::stable_sort(by_name.begin(), by_name.end(),
                   [&](std::size_t a, std::size_t b) { return trace.nodes[a].name < trace.nodes[b].name; });
  std::vector<int> perm(trace.nodes.size());
  for (std::size_t i = 0; i < perm.size(); ++i) perm[i] = static_cast<int>(i);
  Shuffle(perm, rng);
  w.node_rank.assign(trace.nodes.size(), 0);
  for (std::size_t i = 0; i < by_name.size(); ++i) w.node_rank[by_name[i]] = perm[i];
  return w;
}

std::string SimulatorNodeName(int rank, std::string_view name) {
  std::array<char, 16> digits{};
  std::snprintf(digits.data(), digits.size(), "%04d-", rank);
  return std::string(digits.data()) + std::string(name);
}

Result<SyntheticSpec> TraceMachine(const TraceNode& node) {
  if (node.gpus <= 0) return Error(node.name + ": no GPUs");
  SyntheticSpec s;
  s.preset = "trace-" + node.model + "x" + std::to_string(node.gpus);
  s.gpu_model = node.model;
  s.ethernet_nics = 1;
  s.cores_per_numa = static_cast<int>(std::clamp<std::int64_t>(node.cpu_milli / 2000, 1, 1024));
  const std::string& m = node.model;
  const bool big = m == "G2" || m == "G3";
  const bool v100 = m.rfind("V100", 0) == 0;
  // G1-G3 are undisclosed: 32 GiB stands in for the size HAMi's registration reports in a
  // cluster (a share asks a percentage, so the size enters only through HAMi's rounding of it).
  s.gpu_memory_mib = m == "T4" || m == "P100" || m == "V100M16" ? 16384 : m == "A10" ? 24576 : 32768;
  if (node.gpus == 8 && big) {
    // An HGX-style board: 2 sockets, 2 PCIe switches each with 2 GPUs and 1 RDMA NIC, NVSwitch.
    s.sockets = 2;
    s.switches_per_numa = 2;
    s.gpus_per_switch = 2;
    s.nics_per_switch = 1;
    s.nvlink = NvlinkShape::kNvswitch;
    s.nvlinks_per_gpu = 12;
    return s;
  }
  if (node.gpus % 2 == 0 && node.gpus >= 4) {
    // Two sockets, GPUs split under one PCIe switch per socket; V100 boards pair GPUs by NVLink.
    s.sockets = 2;
    s.switches_per_numa = 1;
    s.gpus_per_switch = node.gpus / 2;
    s.nics_per_switch = node.gpus >= 8 ? 1 : 0;
    s.nvlink = v100 ? NvlinkShape::kPairs : NvlinkShape::kNone;
    s.nvlinks_per_gpu = v100 ? 2 : 0;
    return s;
  }
  // One socket, every GPU on its own root port.
  s.sockets = 1;
  s.switches_per_numa = 0;
  s.gpus_per_switch = node.gpus;
  s.nics_per_switch = 0;
  s.nvlink = v100 && node.gpus >= 2 ? NvlinkShape::kPairs : NvlinkShape::kNone;
  s.nvlinks_per_gpu = v100 && node.gpus >= 2 ? 2 : 0;
  s.cores_per_numa = static_cast<int>(std::clamp<std::int64_t>(node.cpu_milli / 1000, 1, 1024));
  return s;
}

namespace trace_internal {

Result<std::shared_ptr<const NodeTopology>> MachineShapes::For(const TraceNode& node) {
  if (node.gpus <= 0) return std::make_shared<const NodeTopology>();
  std::shared_ptr<const NodeTopology>& t = shapes_[{node.model, node.gpus}];
  if (t != nullptr) return t;
  TOPOSCHED_ASSIGN_OR_RETURN(const auto spec, TraceMachine(node));
  TOPOSCHED_ASSIGN_OR_RETURN_CTX(NodeTopology topo, GenerateSynthetic(spec), node.name);
  if (static_cast<int>(topo.gpus.size()) != node.gpus) {
    return Error(node.name + ": machine shape has " + std::to_string(topo.gpus.size()) + " GPUs, not " +
                 std::to_string(node.gpus));
  }
  t = std::make_shared<const NodeTopology>(std::move(topo));
  return t;
}

}  // namespace trace_internal

std::vector<std::string> TracePolicyNames() {
  return {std::string(kTracePolicyToposched), std::string(kTracePolicyFgd), std::string(kTracePolicyBestFit),
          std::string(kTracePolicyFirstFit), std::string(kTracePolicyRandom)};
}

std::vector<std::string> KnownTracePolicyNames() {
  std::vector<std::string> names = TracePolicyNames();
  names.emplace_back(kTracePolicyExtender);
  names.emplace_back(kTracePolicyKubeExtender);
  return names;
}

std::optional<std::pair<double, double>> PublishedRatio(std::string_view variant, std::string_view policy) {
  struct Row {
    std::string_view variant, policy;
    double at100, at130;
  };
  // ../shared/reference/fgd-anchor.md (analysis_allo_discrete.csv of the FGD simulator).
  static constexpr Row kRows[] = {
      {"default", "random", 86.30, 87.47},      {"default", "best-fit", 92.86, 93.08},
      {"default", "fgd", 95.23, 95.39},         {"gpushare40", "random", 84.86, 86.00},
      {"gpushare40", "best-fit", 91.44, 91.69}, {"gpushare40", "fgd", 93.96, 94.15},
      {"multigpu20", "random", 86.92, 88.69},   {"multigpu20", "best-fit", 93.73, 93.93},
      {"multigpu20", "fgd", 95.53, 95.65},      {"cpu050", "random", 89.02, 91.24},
      {"cpu050", "best-fit", 93.56, 93.79},     {"cpu050", "fgd", 95.00, 95.21},
  };
  for (const Row& r : kRows) {
    if (r.variant == variant && r.policy == policy) return std::make_pair(r.at100, r.at130);
  }
  return std::nullopt;
}

}  // namespace toposched::simulate
