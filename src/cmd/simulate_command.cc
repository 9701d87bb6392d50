// `toposched simulate`: a workload through the scheduler's own filter -> score -> reserve code on
// a virtual cluster, compared with baseline policies. With no flags: the embedded default.

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "commands.h"
#include "flags.h"
#include "plugins/registry.h"
#include "toposched/common/file.h"
#include "toposched/common/text.h"
#include "toposched/framework/config.h"
#include "toposched/metrics/logging.h"
#include "toposched/simulate/dra_mode.h"
#include "toposched/simulate/simulator.h"
#include "toposched/simulate/trace.h"
#include "toposched/simulate/trace_families.h"
#include "toposched/topology/synthetic.h"

namespace toposched::cmd {
namespace {

namespace sim = toposched::simulate;

// A whole base-10 integer in [min, max] (toposched::ParseInt's syntax: no blanks, no '+').
bool ParseIntIn(const std::string& s, long long min, long long max, long long& out) {
  const std::optional<long long> v = toposched::ParseInt(s);
  if (!v || *v < min || *v > max) return false;
  out = *v;
  return true;
}

std::vector<std::string> SplitCommas(const std::string& s) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (start <= s.size()) {
    const std::size_t comma = s.find(',', start);
    const std::string item = s.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    if (!item.empty()) out.push_back(item);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

// --policies: empty, or the first name that is not one of `known`.
std::string UnknownPolicy(const std::string& text, const std::vector<std::string>& known) {
  for (const std::string& name : SplitCommas(text)) {
    if (std::find(known.begin(), known.end(), name) == known.end()) {
      std::string list;
      for (const std::string& k : known) list += (list.empty() ? "" : ", ") + k;
      return "--policies: unknown policy '" + name + "' (known: " + list + ")";
    }
  }
  return "";
}

// --seeds: "N", "A-B" or a comma list of them, A <= B, at most 1000 in a range. An empty string
// on success, else what is wrong (a usage error).
std::string ParseSeeds(const std::string& text, std::vector<std::uint32_t>& out) {
  out.clear();
  for (const std::string& item : SplitCommas(text)) {
    const std::size_t dash = item.find('-');
    long long a = 0, b = 0;
    const bool ok = dash == std::string::npos ? ParseIntIn(item, 0, 4294967295LL, a) && (b = a, true)
                                              : ParseIntIn(item.substr(0, dash), 0, 4294967295LL, a) &&
                                                    ParseIntIn(item.substr(dash + 1), 0, 4294967295LL, b);
    if (!ok) return "--seeds: expected N, A-B or a list of them, got '" + item + "'";
    if (b < a) return "--seeds: '" + item + "' is an empty range (A-B needs A <= B)";
    if (b - a >= 1000) return "--seeds: '" + item + "' is more than 1000 seeds";
    for (long long v = a; v <= b; ++v) out.push_back(static_cast<std::uint32_t>(v));
  }
  if (out.empty()) return "--seeds: no seeds in '" + text + "'";
  return "";
}

// Draws on stderr. On a terminal: one bar, redrawn in place at most ten times a second. In a
// log: a line per quarter of each policy, so long runs show life without flooding the log.
class Progress {
 public:
  Progress(bool tty, std::size_t policies) : tty_(tty), policies_(policies) {}

  void Update(std::string_view policy, std::size_t index, std::size_t done, std::size_t total) {
    if (total == 0) return;
    const bool last = done == total;
    if (tty_) {
      const auto now = std::chrono::steady_clock::now();
      if (!last && now - drawn_ < std::chrono::milliseconds(100)) return;
      drawn_ = now;
      constexpr std::size_t kWidth = 30;
      const std::size_t filled = kWidth * done / total;
      std::string bar(filled, '#');
      bar.append(kWidth - filled, '.');
      std::fprintf(stderr, "\r[%zu/%zu] %-13.*s [%s] %zu/%zu pods", index + 1, policies_,
                   static_cast<int>(policy.size()), policy.data(), bar.c_str(), done, total);
      if (last) std::fputc('\n', stderr);
      std::fflush(stderr);
      return;
    }
    const std::size_t quarter = 4 * done / total;
    if (quarter == last_quarter_ && index == last_index_) return;
    if (quarter == 0) return;
    last_quarter_ = quarter;
    last_index_ = index;
    std::fprintf(stderr, "simulate: %.*s %zu/%zu pods\n", static_cast<int>(policy.size()), policy.data(),
                 done, total);
  }

 private:
  bool tty_;
  std::size_t policies_;
  std::chrono::steady_clock::time_point drawn_{};
  std::size_t last_quarter_ = 0, last_index_ = static_cast<std::size_t>(-1);
};

// --families: the levels to generate, and where to write them (empty: nowhere).
struct FamilyRequest {
  std::vector<sim::TraceFamilyLevel> levels;
  std::uint32_t seed = 1;
  std::string write_dir;
};

// The traces to replay: DIR's variants, or the family levels generated from DIR's default pod
// list (each written to the request's directory when it names one).
Result<std::vector<sim::Trace>> TracesToReplay(const std::string& dir, const std::string& variants_arg,
                                               const std::optional<FamilyRequest>& families,
                                               bool no_progress) {
  std::vector<sim::Trace> traces;
  if (!families) {
    const std::vector<std::string> variants =
        variants_arg.empty() ? sim::TraceVariants(dir) : SplitCommas(variants_arg);
    if (variants.empty()) return Error(dir + ": no openb_pod_list_<variant>.csv files");
    for (const std::string& variant : variants) {
      TOPOSCHED_ASSIGN_OR_RETURN(sim::Trace trace, sim::LoadTrace(dir, variant));
      traces.push_back(std::move(trace));
    }
    return traces;
  }
  TOPOSCHED_ASSIGN_OR_RETURN(const sim::Trace base, sim::LoadTrace(dir, "default"));
  const std::filesystem::path out_dir = families->write_dir;
  if (!families->write_dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(out_dir, ec);
    if (ec) return Error(families->write_dir + ": cannot create: " + ec.message());
    const std::filesystem::path node_list = out_dir / "openb_node_list_gpu_node.csv";
    std::filesystem::copy_file(std::filesystem::path(dir) / "openb_node_list_gpu_node.csv", node_list,
                               std::filesystem::copy_options::overwrite_existing, ec);
    if (ec) return Error(node_list.string() + ": cannot write: " + ec.message());
  }
  for (const sim::TraceFamilyLevel& level : families->levels) {
    TOPOSCHED_ASSIGN_OR_RETURN(sim::Trace trace, sim::MakeFamilyVariant(base, level, families->seed));
    if (!no_progress) {
      const sim::TraceMixFacts facts = sim::MixFactsOf(trace.tasks);
      std::fprintf(stderr,
                   "simulate: family %s: %zu tasks, multi-GPU %.1f %% of GPU demand, shared %.1f %%, "
                   "pinned %.1f %%\n",
                   trace.variant.c_str(), facts.tasks, 100 * facts.multi_gpu_demand,
                   100 * facts.shared_demand, 100 * facts.pinned_tasks);
    }
    if (!families->write_dir.empty()) {
      const std::filesystem::path path = out_dir / ("openb_pod_list_" + trace.variant + ".csv");
      std::ofstream out(path, std::ios::binary | std::ios::trunc);
      out << sim::FormatTraceTasksCsv(trace.tasks);
      if (!out.flush()) return Error(path.string() + ": cannot write");
    }
    traces.push_back(std::move(trace));
  }
  return traces;
}

// `simulate --trace`: each variant (or generated family level) replayed with every policy and seed.
int RunTraceReplay(const std::string& dir, const std::string& variants_arg,
                   const std::optional<FamilyRequest>& families, const std::vector<std::uint32_t>& seeds,
                   long long max_tasks, const std::string& policies_arg, const std::string& config_path,
                   bool json, bool no_progress, bool cpu_blind) {
  auto fail = [](const std::string& message) {
    std::fprintf(stderr, "toposched simulate: %s\n", message.c_str());
    return 1;
  };
  sim::TraceReplayOptions options;
  if (!policies_arg.empty()) options.policies = SplitCommas(policies_arg);
  // The extender policies run the extender, which logs every bind at info: warnings only here.
  metrics::ConfigureLogging(metrics::LogFormat::kText, metrics::LogLevel::kWarn);
  if (max_tasks > 0) options.max_tasks = static_cast<std::size_t>(max_tasks);
  options.toposched_cpu_blind = cpu_blind;
  if (!seeds.empty()) options.seeds = seeds;
  if (!config_path.empty()) {
    auto yaml = ReadFileBounded(config_path, framework::kMaxConfigYamlBytes);
    if (!yaml.ok()) return fail(yaml.error().WithContext(config_path).message());
    auto config = framework::LoadSchedulerConfigYaml(*yaml, plugins::BuiltinRegistry());
    if (!config.ok()) return fail(config_path + ": " + config.error().message());
    options.config = std::move(config).value();
  }
  auto traces = TracesToReplay(dir, variants_arg, families, no_progress);
  if (!traces.ok()) return fail(traces.error().message());
  const bool tty = !no_progress && isatty(STDERR_FILENO) != 0;
  std::vector<sim::TraceReplayResult> results;
  for (const sim::Trace& trace : *traces) {
    const std::string& variant = trace.variant;
    if (!no_progress) {
      options.progress = [&, last = std::chrono::steady_clock::time_point{}](
                             std::string_view policy, std::uint32_t seed, std::size_t done,
                             std::size_t total) mutable {
        const auto now = std::chrono::steady_clock::now();
        if (done != total && now - last < std::chrono::seconds(tty ? 1 : 30)) return;
        last = now;
        std::fprintf(stderr, "%ssimulate: %s %.*s seed %u %zu/%zu tasks%s", tty ? "\r" : "", variant.c_str(),
                     static_cast<int>(policy.size()), policy.data(), seed, done, total, tty ? "   " : "\n");
        std::fflush(stderr);
      };
    }
    auto result = sim::ReplayTrace(trace, options);
    if (tty && !no_progress) std::fputc('\n', stderr);
    if (!result.ok()) return fail(variant + ": " + result.error().message());
    results.push_back(std::move(result).value());
  }
  std::fputs((json ? sim::FormatTraceJson(results) : sim::FormatTraceTable(results)).c_str(), stdout);
  if (families && !json) std::fputs(("\n" + sim::FormatFamilyTable(results)).c_str(), stdout);
  return 0;
}

// `simulate --dra`: the generated workload of every seed on the cluster, DRA's first-fit
// allocator choosing the devices, first fit or toposched's ranking choosing the node.
int RunDraMode(const sim::VirtualCluster& cluster, const std::vector<std::uint32_t>& seeds, int pods,
               int pd_pools, const std::optional<framework::SchedulerConfig>& config, bool json,
               bool no_progress) {
  sim::DraResult result;
  int gpus = 0, nics = 0;
  for (const sim::VirtualNode& node : cluster.nodes) {
    gpus += static_cast<int>(node.topology->gpus.size());
    nics += node.topology->RdmaNicCount();
  }
  result.cluster_description = std::to_string(cluster.nodes.size()) + " nodes, " + std::to_string(gpus) +
                               " GPUs, " + std::to_string(nics) + " RDMA NICs";
  sim::DraOptions options;
  options.config = config;
  for (const std::uint32_t seed : seeds) {
    sim::WorkloadSpec spec = sim::DefaultWorkloadSpec(cluster, pods, seed);
    if (pd_pools >= 0) spec.pd_pools = pd_pools;
    const sim::Workload workload = sim::GenerateWorkload(spec);
    if (result.workload_description.empty()) result.workload_description = workload.description;
    if (!no_progress) std::fprintf(stderr, "simulate --dra: seed %u\n", seed);
    auto run = sim::SimulateDra(cluster, workload, seed, options);
    if (!run.ok()) {
      std::fprintf(stderr, "toposched simulate: seed %u: %s\n", seed, run.error().message().c_str());
      return 1;
    }
    result.seeds.push_back(std::move(run).value());
  }
  const std::string report = json ? sim::FormatDraJson(result) : sim::FormatDraTable(result);
  std::fwrite(report.data(), 1, report.size(), stdout);
  return 0;
}

}  // namespace

int RunSimulate(const std::vector<std::string>& args) {
  std::string topologies, workload_path, config_path, svg_path, policies_arg, shapes_arg;
  std::string trace_dir, variants_arg, seeds_arg, families_arg, write_families;
  long long max_tasks = 0, family_seed = 1;
  long long nodes = sim::kDefaultNodes, pods = sim::kDefaultPods, seed = 1, copies = 1, pd_pools = -1;
  long long topology_mix = 0, mix_seed = 1;
  bool json = false, no_progress = false, cpu_blind = false, dra = false;
  FlagSet flags(
      "simulate", "toposched simulate [flags]",
      "Runs a workload through the scheduler's filter -> score -> reserve code (in process, no\n"
      "HTTP) on a virtual cluster and compares policies side by side: pods placed and pending,\n"
      "the worst GPU->NIC class pods got, how many got the best class their node allowed, the\n"
      "aligned 8-GPU slots left free at the end, shared-GPU packing, the KV-transfer paths of\n"
      "Prefill->Decode pairs (and how often a P/D pod got the cheapest one), the per-leaf P:D\n"
      "ratio error of each pool, and the decision time per pod. With no flags it runs the\n"
      "embedded default: " +
          std::to_string(sim::kDefaultNodes) + " nodes of mixed real-world shapes and " +
          std::to_string(sim::kDefaultPods) +
          " pods of an LLM serving mix\n"
          "(prefill and decode in 8 pools). Placements and transfer times are simulated (estimated\n"
          "with the config's network costs); decision times are measured.\n\n"
          "policies:\n"
          "  toposched     the framework with the builtin plugins (or --config): best score wins\n"
          "  first-fit     lowest free GPUs and NICs, first node that fits (a device plugin)\n"
          "  gpu-only      best GPU set by NVLink/PCIe, NICs first-fit (NVIDIA's GPU ranking)\n"
          "  root-complex  GPUs and NICs under one PCIe root complex when possible (Koordinator\n"
          "                SamePCIe, DRA pcieRoot)\n\n"
          "--dra: every whole-GPU pod as a DRA claim (GPUs and RDMA NICs, a shared pcieRoot as the\n"
          "first alternative), devices by DRA's first-fit allocator in slice order; the node by\n"
          "`dra-first-fit` (the first that fits) or `toposched` (its ranking); see docs/placement.md");
  flags.Group("cluster");
  auto* nodes_flag =
      flags.Integer("--nodes", nodes, 0, 100000, "N",
                    "synthetic nodes of the default mix (0 with --topologies for\nfiles only)");
  flags.Text("--shapes", shapes_arg, "P=N,...",
             "synthetic presets and counts instead of the default mix\n"
             "(see `toposched topo --list-synthetic`)");
  flags.Text("--topologies", topologies, "DIR",
             "add a node for every *.xml / *.json topology file with GPUs");
  auto* copies_flag = flags.Integer("--copies", copies, 1, 10000, "N", "nodes per topology file");
  flags
      .Integer("--topology-mix", topology_mix, 1, 100000, "N",
               "instead of --copies of each, N nodes drawn at random from the\n"
               "--topologies files with GPUs (seeded by --mix-seed)")
      ->default_str("");
  auto* mix_seed_flag =
      flags.Integer("--mix-seed", mix_seed, 0, 4294967295LL, "N", "seed of the --topology-mix draw");
  flags.Group("workload");
  flags.Text("--workload", workload_path, "FILE",
             "workload JSON: {\"pods\": [{\"name\", \"arrival\", \"duration\",\n"
             "\"kind\", \"pod\": <Pod>}]} instead of the generator");
  flags.Integer("--pods", pods, 1, 10000000, "N", "generated pods");
  flags.Integer("--seed", seed, 0, 4294967295LL, "N", "generator seed");
  flags
      .Integer("--pd-pools", pd_pools, 0, 1000, "N",
               "Prefill/Decode pools the generator makes (0: P/D pods without\n"
               "pools, which the pool plugins ignore)")
      ->default_str("8");
  flags.Group("policies and output");
  flags.Text("--policies", policies_arg, "a,b,...", "policies to compare (default: all, toposched first)");
  flags.Text("--config", config_path, "FILE", "scheduler configuration YAML for the toposched policy");
  flags.Switch("--json", json, "print JSON instead of the table");
  flags.Text("--svg", svg_path, "FILE", "also write a picture of the placements and class histograms");
  flags.Switch("--no-progress", no_progress, "never draw the progress bar");
  flags.Switch("--dra", dra,
               "DRA mode: DRA's first-fit devices on the node of dra-first-fit or\n"
               "toposched, shared pods left out; takes --seeds (default: --seed)");
  flags.Group("trace replay (the Alibaba GPU trace with FGD's protocol, see docs/placement.md)");
  flags.Text("--trace", trace_dir, "DIR",
             "replay DIR/openb_node_list_gpu_node.csv with each\n"
             "DIR/openb_pod_list_<variant>.csv: tasks shuffled by the seed, tuned\n"
             "to 130% of GPU capacity, and report the GPU allocation ratio at\n"
             "100% and 130% arrived per policy (toposched, fgd, best-fit,\n"
             "first-fit, random; `extender` too when --policies names it: the\n"
             "extender's HTTP verbs in process), mean over the seeds");
  flags.Text("--variants", variants_arg, "a,b,...", "trace variants (default: every pod list in DIR)");
  flags.Text("--families", families_arg, "SPEC",
             "generate workload families from DIR's default pod list and replay\n"
             "each level (all: multigpu 20-60, gpushare 40-100, gpuspec 10-33,\n"
             "cpu 50-300; or e.g. multigpu:20:40,cpu:300); see docs/placement.md");
  auto* family_seed_flag =
      flags.Integer("--family-seed", family_seed, 0, 4294967295LL, "N", "seed of the --families generator");
  flags.Text("--write-families", write_families, "DIR2",
             "also write each generated level as DIR2/openb_pod_list_<name>.csv\n"
             "with a copy of the node list (for the FGD simulator or --trace DIR2)");
  flags.Text("--seeds", seeds_arg, "A-B|a,b,...",
             "seeds of the shuffle and tuning (default 42-51, as the FGD paper)");
  flags
      .Integer("--max-tasks", max_tasks, 1, 100000000, "N",
               "replay only the first N tasks of each tuned workload")
      ->default_str("");
  flags.Switch("--cpu-blind", cpu_blind,
               "toposched sees no CPU (neither the tasks' requests nor the nodes'\n"
               "free CPU): its packing counts every node's CPU as enough");
  if (const auto exit_code = flags.Parse(args)) return *exit_code;
  const bool nodes_given = flags.Given(nodes_flag);
  const bool family_flags = !families_arg.empty() || flags.Given(family_seed_flag) || !write_families.empty();
  auto usage = [&flags](const std::string& message) { return flags.UsageError(message); };
  if (!trace_dir.empty()) {
    if (dra) return usage("--dra simulates the generated workload; it does not apply to --trace");
    if (!topologies.empty() || !workload_path.empty() || !shapes_arg.empty() || nodes_given ||
        topology_mix > 0 || pods != sim::kDefaultPods || seed != 1 || pd_pools >= 0 || !svg_path.empty()) {
      return usage(
          "--trace replays the trace's own cluster and tasks; it takes --variants, --families, "
          "--family-seed, --write-families, --seeds, --max-tasks, --cpu-blind, --policies, --config, "
          "--json and --no-progress only");
    }
    std::optional<FamilyRequest> families;
    if (!families_arg.empty()) {
      if (!variants_arg.empty())
        return usage("--families generates its variants; give --variants or --families");
      auto levels = sim::ParseTraceFamilies(families_arg);
      if (!levels.ok()) return usage("--families: " + levels.error().message());
      families =
          FamilyRequest{std::move(levels).value(), static_cast<std::uint32_t>(family_seed), write_families};
    } else if (flags.Given(family_seed_flag) || !write_families.empty()) {
      return usage("--family-seed and --write-families apply to --families");
    }
    std::vector<std::uint32_t> seeds;
    if (!seeds_arg.empty()) {
      if (const std::string bad = ParseSeeds(seeds_arg, seeds); !bad.empty()) return usage(bad);
    }
    if (const std::string bad = UnknownPolicy(policies_arg, sim::KnownTracePolicyNames()); !bad.empty()) {
      return usage(bad);
    }
    return RunTraceReplay(trace_dir, variants_arg, families, seeds, max_tasks, policies_arg, config_path,
                          json, no_progress, cpu_blind);
  }
  if (!variants_arg.empty() || (!seeds_arg.empty() && !dra) || max_tasks > 0 || cpu_blind || family_flags) {
    return usage(
        "--variants, --families, --family-seed, --write-families, --seeds, --max-tasks and --cpu-blind "
        "apply to --trace (--seeds to --dra too)");
  }
  std::vector<std::uint32_t> dra_seeds{static_cast<std::uint32_t>(seed)};
  if (dra) {
    if (!workload_path.empty() || !svg_path.empty() || !policies_arg.empty()) {
      return usage(
          "--dra generates its workload and runs both DRA policies; --workload, --svg and "
          "--policies do not apply");
    }
    if (!seeds_arg.empty() && seed != 1) return usage("--seeds and --seed both choose the seeds; give one");
    if (!seeds_arg.empty()) {
      if (const std::string bad = ParseSeeds(seeds_arg, dra_seeds); !bad.empty()) return usage(bad);
    }
  }
  if (topology_mix > 0 && topologies.empty())
    return usage("--topology-mix draws from the --topologies files");
  if (topology_mix > 0 && flags.Given(copies_flag))
    return usage("--topology-mix and --copies both size the nodes of the files; give one");
  if (flags.Given(mix_seed_flag) && topology_mix == 0) return usage("--mix-seed applies to --topology-mix");
  if (!shapes_arg.empty() && nodes_given)
    return usage("--shapes and --nodes both size the synthetic nodes; give one");
  if (!workload_path.empty() && (pods != sim::kDefaultPods || seed != 1)) {
    return usage("--pods and --seed shape the generated workload; they do not apply to --workload");
  }
  if (const std::string bad = UnknownPolicy(policies_arg, sim::PolicyNames()); !bad.empty())
    return usage(bad);
  auto fail = [](const std::string& message) {
    std::fprintf(stderr, "toposched simulate: %s\n", message.c_str());
    return 1;
  };

  sim::SimulationOptions options;
  if (!policies_arg.empty()) options.policies = SplitCommas(policies_arg);
  if (!config_path.empty()) {
    auto yaml = ReadFileBounded(config_path, framework::kMaxConfigYamlBytes);
    if (!yaml.ok()) return fail(yaml.error().WithContext(config_path).message());
    auto config = framework::LoadSchedulerConfigYaml(*yaml, plugins::BuiltinRegistry());
    if (!config.ok()) return fail(config_path + ": " + config.error().message());
    options.policy_options.config = std::move(config).value();
  }

  sim::VirtualCluster cluster;
  std::vector<sim::ShapeCount> shapes;
  if (!shapes_arg.empty()) {
    for (const std::string& item : SplitCommas(shapes_arg)) {
      const std::size_t eq = item.find('=');
      long long count = 0;
      if (eq == std::string::npos || !ParseIntIn(item.substr(eq + 1), 0, 100000, count)) {
        return usage("--shapes: expected PRESET=COUNT, got '" + item + "'");
      }
      if (auto preset = SyntheticPreset(item.substr(0, eq)); !preset.ok()) {
        return usage("--shapes: " + preset.error().message());
      }
      shapes.push_back({item.substr(0, eq), static_cast<int>(count)});
    }
  } else {
    shapes = sim::DefaultShapes(static_cast<int>(nodes));
  }
  if (Status s = sim::AddSyntheticNodes(shapes, cluster); !s.ok()) return fail(s.error().message());
  if (!topologies.empty()) {
    std::vector<std::string> skipped;
    const Status added =
        topology_mix > 0 ? sim::AddTopologyMix(topologies, static_cast<int>(topology_mix),
                                               static_cast<std::uint32_t>(mix_seed), cluster, &skipped)
                         : sim::AddTopologyDirectory(topologies, static_cast<int>(copies), cluster, &skipped);
    if (!added.ok()) return fail(added.error().message());
    if (!skipped.empty()) {
      std::fprintf(stderr, "toposched simulate: %zu topology files without GPUs skipped\n", skipped.size());
    }
  }
  if (cluster.nodes.empty()) return usage("the cluster has no nodes (--nodes 0 without --topologies)");
  if (dra) {
    return RunDraMode(cluster, dra_seeds, static_cast<int>(pods), static_cast<int>(pd_pools),
                      options.policy_options.config, json, no_progress);
  }

  sim::Workload workload;
  if (!workload_path.empty()) {
    const RequestConfig request_config =
        options.policy_options.config ? options.policy_options.config->request : RequestConfig{};
    auto loaded = sim::LoadWorkloadFile(workload_path, request_config);
    if (!loaded.ok()) return fail(loaded.error().message());
    workload = std::move(loaded).value();
  } else {
    sim::WorkloadSpec spec =
        sim::DefaultWorkloadSpec(cluster, static_cast<int>(pods), static_cast<std::uint32_t>(seed));
    if (pd_pools >= 0) spec.pd_pools = static_cast<int>(pd_pools);
    workload = sim::GenerateWorkload(spec);
  }

  const bool tty = ::isatty(STDERR_FILENO) != 0;
  std::optional<Progress> progress;
  if (!no_progress && (tty || workload.pods.size() > 500)) {
    progress.emplace(tty, options.policies.size());
    options.progress = [&progress](std::string_view policy, std::size_t index, std::size_t done,
                                   std::size_t total) { progress->Update(policy, index, done, total); };
  }

  auto result = sim::Simulate(cluster, workload, options);
  if (!result.ok()) return fail(result.error().message());
  if (!svg_path.empty()) {
    std::ofstream out(svg_path, std::ios::binary | std::ios::trunc);
    out << sim::RenderSvg(*result);
    if (!out.flush()) return fail(svg_path + ": cannot write");
  }
  const std::string report = json ? sim::FormatJson(*result) : sim::FormatTable(*result);
  std::fwrite(report.data(), 1, report.size(), stdout);
  return 0;
}

}  // namespace toposched::cmd
