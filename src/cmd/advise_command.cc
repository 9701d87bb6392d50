// `toposched advise`: co-located or disaggregated Prefill/Decode for a model, a workload and a
// cluster, estimated analytically (toposched/pd/advise.h). With no flags: a worked example.

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "commands.h"
#include "flags.h"
#include "plugins/registry.h"
#include "toposched/common/file.h"
#include "toposched/common/text.h"
#include "toposched/framework/config.h"
#include "toposched/pd/advise.h"
#include "toposched/placement/placement.h"
#include "toposched/simulate/simulator.h"

namespace toposched::cmd {
namespace {

namespace sim = toposched::simulate;

constexpr const char* kDefaultModel = "llama-3-70b";
constexpr const char* kDefaultGpu = "h100-sxm";
constexpr const char* kDefaultPrompt = "lognormal:2048,0.8";
constexpr const char* kDefaultOutput = "lognormal:256,0.6";

// What the cluster gives P/D pairs of `gpus_per_instance`-GPU instances: the paths pairs can
// take (cheapest first), the endpoint an instance gets on an empty node (the placement
// engine's choice of g GPUs and min(g, node NICs) RDMA NICs; the worst over node types), and
// a description. Nodes count when they have enough GPUs of the chosen kind (by model name;
// every node with enough GPUs when none names it).
struct ClusterPaths {
  std::vector<pd::PathKind> paths;
  pd::Endpoint endpoint;
  int gpus = 0;
  std::string description;
};

Result<ClusterPaths> DerivePaths(const sim::VirtualCluster& cluster, const pd::NetworkConfig& network,
                                 const pd::GpuProfile& gpu, int g) {
  const std::string token = AsciiLower(gpu.name.substr(0, gpu.name.find('-')));
  auto has_enough = [&](const sim::VirtualNode& n, bool match_model) {
    if (!n.topology || static_cast<int>(n.topology->gpus.size()) < g) return false;
    if (!match_model) return true;
    return std::any_of(n.topology->gpus.begin(), n.topology->gpus.end(),
                       [&](const Gpu& x) { return AsciiLower(x.model).find(token) != std::string::npos; });
  };
  bool match_model = std::any_of(cluster.nodes.begin(), cluster.nodes.end(),
                                 [&](const sim::VirtualNode& n) { return has_enough(n, true); });
  std::vector<const sim::VirtualNode*> eligible;
  for (const sim::VirtualNode& n : cluster.nodes) {
    if (has_enough(n, match_model)) eligible.push_back(&n);
  }
  if (eligible.empty()) {
    return Error("no node of the cluster has " + std::to_string(g) + " GPUs for one instance");
  }
  ClusterPaths out;
  std::set<pd::PathKind> kinds;
  std::map<std::vector<std::string>, int> positions;  // tier domains -> nodes there
  bool two_fit_one_node = false;
  std::map<std::string, const NodeTopology*> shapes;  // fingerprint -> topology
  for (const sim::VirtualNode* n : eligible) {
    out.gpus += static_cast<int>(n->topology->gpus.size());
    if (static_cast<int>(n->topology->gpus.size()) >= 2 * g) two_fit_one_node = true;
    ++positions[pd::LocateByLabels(network, n->name, n->labels).domains];
    shapes.emplace(n->topology->Fingerprint(), n->topology.get());
  }
  if (two_fit_one_node)
    kinds.insert(network.same_node_ipc ? pd::PathKind::kSameNodeIpc : pd::PathKind::kSameNodeRdma);
  for (auto a = positions.begin(); a != positions.end(); ++a) {
    const pd::Location la{"a", a->first};
    if (a->second >= 2) kinds.insert(pd::PathBetween(network, la, pd::Location{"b", a->first}));
    for (auto b = std::next(a); b != positions.end(); ++b) {
      kinds.insert(pd::PathBetween(network, la, pd::Location{"b", b->first}));
    }
  }
  out.paths.assign(kinds.begin(), kinds.end());
  if (out.paths.empty()) return Error("only one instance fits the cluster: no pair of instances for P and D");

  // The endpoint: the worst over node types that have RDMA NICs (nodes without any would serve
  // KV over TCP; they are named in the description).
  bool any_nic = false;
  int without_nics = 0;
  pd::Endpoint& e = out.endpoint;
  e.gpus = g;
  e.rdma_nics = g;
  e.worst_class = LinkClass::kPIX;
  for (const auto& [fingerprint, topology] : shapes) {
    const int nics = topology->RdmaNicCount();
    if (nics == 0) {
      ++without_nics;
      continue;
    }
    PlacementRequest request;
    request.gpus = g;
    request.rdma_nics = std::min(g, nics);
    const PlacementOutcome placed = PlaceOnNode(*topology, {}, request);
    if (!placed.ok()) continue;
    any_nic = true;
    e.rdma_nics = std::min(e.rdma_nics, request.rdma_nics);
    e.worst_class = std::max(e.worst_class, placed.placement->worst_class);
    for (int nic : placed.placement->nics) {
      const double gbps =
          static_cast<double>(topology->nics[static_cast<std::size_t>(nic)].link_rate_mbps) / 8000.0;
      if (gbps > 0) e.nic_gbps = e.nic_gbps > 0 ? std::min(e.nic_gbps, gbps) : gbps;
    }
  }
  if (!any_nic) e.rdma_nics = 0;
  std::string paths;
  for (pd::PathKind p : out.paths) paths += (paths.empty() ? "" : ", ") + std::string(pd::ToString(p));
  out.description = std::to_string(eligible.size()) + " nodes with " + std::to_string(g) + "+ " +
                    (match_model ? token + " " : "") + "GPUs; P/D paths: " + paths + "; an instance gets " +
                    std::to_string(e.rdma_nics) + " RDMA NICs, worst GPU->NIC " +
                    std::string(ToString(e.worst_class));
  if (without_nics > 0)
    out.description += " (" + std::to_string(without_nics) + " node types without RDMA NICs not counted)";
  return out;
}

}  // namespace

int RunAdvise(const std::vector<std::string>& args) {
  std::string model_name, gpu_name = kDefaultGpu, prompt_spec = kDefaultPrompt, output_spec = kDefaultOutput;
  std::string config_path, topology_dir, svg_path;
  long long layers = 0, kv_heads = 0, head_dim = 0, dtype_bytes = 0, per_instance = 8, gpus = 16;
  double params_b = 0, mfu = 0, mbu = 0, rate = 2, ttft = 2000, tpot = 60;
  bool json = false;
  std::string models, gpu_names;
  // Three presets a help line, so that the help stays within 100 columns.
  std::size_t listed = 0;
  for (const pd::ModelSpec& m : pd::ModelPresets()) {
    models += (listed == 0 ? "" : listed % 3 == 0 ? ",\n" : ", ") + m.name;
    ++listed;
  }
  for (const pd::GpuProfile& g : pd::GpuPresets()) gpu_names += (gpu_names.empty() ? "" : ", ") + g.name;
  FlagSet flags(
      "advise", "toposched advise [flags]",
      std::string("Estimates, for a model, a workload and a cluster, whether Prefill and Decode should be\n"
                  "co-located or disaggregated (and at which P:D ratio): the KV transfer per request along\n"
                  "each network path, its share of TTFT, the P99 TTFT and TPOT of each option and the\n"
                  "highest rate at which each meets the targets. An analytic estimate, not a measurement;\n"
                  "the output says where it is uncertain (docs/advise.md has every formula). With no flags\n"
                  "it runs an example: ") +
          kDefaultModel + " on 16 x " + kDefaultGpu + ", TP8, 2 rps, TTFT 2000 ms, TPOT 60 ms.");
  flags.Group("model");
  flags.Text("--model", model_name, "NAME", "a preset: " + models)->default_str(kDefaultModel);
  const std::string custom_help = "a custom shape, or an override of the preset's field";
  flags.Integer("--layers", layers, 1, 1000, "N", "layers: " + custom_help)->default_str("");
  flags.Integer("--kv-heads", kv_heads, 1, 1024, "N", "KV heads: " + custom_help)->default_str("");
  flags.Integer("--head-dim", head_dim, 1, 4096, "N", "head dimension: " + custom_help)->default_str("");
  flags.Integer("--dtype-bytes", dtype_bytes, 1, 8, "N", "bytes per KV element: " + custom_help)
      ->default_str("");
  flags.Number("--params-b", params_b, 0.001, 100000, "B", "parameters, billions: " + custom_help)
      ->default_str("");
  flags.Group("hardware");
  flags.Text("--gpu", gpu_name, "NAME", "a preset: " + gpu_names);
  flags.Number("--mfu", mfu, 0.01, 1, "F", "prefill FLOPs utilisation (an assumption)")->default_str("0.5");
  flags.Number("--mbu", mbu, 0.01, 1, "F", "decode bandwidth utilisation (an assumption)")
      ->default_str("0.7");
  flags.Integer("--gpus-per-instance", per_instance, 1, 1024, "N", "tensor-parallel GPUs per instance");
  flags.Integer("--gpus", gpus, 1, 1000000, "N", "GPUs for this model, both phases together");
  flags.Group("workload");
  flags.Text("--prompt", prompt_spec, "SPEC",
             "prompt tokens: fixed:N, uniform:A-B, lognormal:MEDIAN,SIGMA or\nlist:a,b,c");
  flags.Text("--output", output_spec, "SPEC", "output tokens, same forms");
  flags.Number("--rate", rate, 0.000001, 1e6, "RPS", "requests per second, the whole service");
  flags.Number("--ttft-p99-ms", ttft, 0.001, 1e9, "MS", "P99 time-to-first-token target");
  flags.Number("--tpot-p99-ms", tpot, 0.001, 1e9, "MS", "P99 time-per-output-token target");
  flags.Group("cluster");
  flags.Text("--config", config_path, "FILE",
             "scheduler YAML; its network: section sets tiers and path costs");
  flags.Text("--topology-dir", topology_dir, "DIR",
             "a cluster of one node per *.xml / *.json topology file: the paths\n"
             "P and D can take and the NICs an instance gets come from it\n"
             "(default: the simulator's embedded " +
                 std::to_string(sim::kDefaultNodes) + "-node cluster)");
  flags.Group("output");
  flags.Switch("--json", json, "JSON instead of the table");
  flags.Text("--svg", svg_path, "FILE", "also write transfer time vs prompt length, one line per path");
  if (const auto exit_code = flags.Parse(args)) return *exit_code;
  auto usage = [&flags](const std::string& message) { return flags.UsageError(message); };
  auto fail = [](const std::string& message) {
    std::fprintf(stderr, "toposched advise: %s\n", message.c_str());
    return 1;
  };

  pd::AdviseInput in;
  const bool custom = layers > 0 || kv_heads > 0 || head_dim > 0 || params_b > 0 || dtype_bytes > 0;
  if (!model_name.empty() || !custom) {
    auto preset = pd::FindModel(model_name.empty() ? kDefaultModel : model_name);
    if (!preset.ok()) return usage(preset.error().message());
    in.model = *preset;
  } else {
    if (layers <= 0 || kv_heads <= 0 || head_dim <= 0 || params_b <= 0)
      return usage("a custom model needs --layers, --kv-heads, --head-dim and --params-b (or --model NAME)");
    in.model.name = "custom";
  }
  if (layers > 0) in.model.layers = static_cast<int>(layers);
  if (kv_heads > 0) in.model.kv_heads = static_cast<int>(kv_heads);
  if (head_dim > 0) in.model.head_dim = static_cast<int>(head_dim);
  if (dtype_bytes > 0) in.model.dtype_bytes = static_cast<int>(dtype_bytes);
  if (params_b > 0) in.model.params_billion = params_b;
  if (custom && !model_name.empty()) in.model.name += " (modified)";

  auto gpu = pd::FindGpu(gpu_name);
  if (!gpu.ok()) return usage(gpu.error().message());
  in.gpu = *gpu;
  if (mfu > 0) in.gpu.mfu = mfu;
  if (mbu > 0) in.gpu.mbu = mbu;
  in.gpus_per_instance = static_cast<int>(per_instance);
  in.total_gpus = static_cast<int>(gpus);
  for (auto [spec, out, name] :
       {std::tuple{&prompt_spec, &in.prompt, "--prompt"}, std::tuple{&output_spec, &in.output, "--output"}}) {
    auto dist = pd::ParseLengthDist(*spec);
    if (!dist.ok()) return usage(std::string(name) + ": " + dist.error().message());
    *out = std::move(dist).value();
  }
  in.rate_rps = rate;
  in.ttft_p99_ms = ttft;
  in.tpot_p99_ms = tpot;

  if (!config_path.empty()) {
    auto yaml = ReadFileBounded(config_path, framework::kMaxConfigYamlBytes);
    if (!yaml.ok()) return fail(yaml.error().WithContext(config_path).message());
    auto config = framework::LoadSchedulerConfigYaml(*yaml, plugins::BuiltinRegistry());
    if (!config.ok()) return fail(config_path + ": " + config.error().message());
    in.network = config->network;
  }

  sim::VirtualCluster cluster;
  if (!topology_dir.empty()) {
    if (Status s = sim::AddTopologyDirectory(topology_dir, 1, cluster); !s.ok())
      return fail(s.error().message());
  } else {
    auto embedded = sim::DefaultCluster();
    if (!embedded.ok()) return fail(embedded.error().message());
    cluster = std::move(embedded).value();
  }
  if (in.total_gpus >= in.gpus_per_instance) {  // else Advise names the mistake
    auto derived = DerivePaths(cluster, in.network, in.gpu, in.gpus_per_instance);
    if (!derived.ok())
      return fail((topology_dir.empty() ? "the default cluster" : topology_dir) + ": " +
                  derived.error().message());
    in.paths = derived->paths;
    in.prefill_end = in.decode_end = derived->endpoint;
    in.cluster_description =
        (topology_dir.empty() ? "embedded default cluster: " : topology_dir + ": ") + derived->description;
    if (derived->gpus < in.total_gpus) {
      return fail("the cluster has " + std::to_string(derived->gpus) + " suitable GPUs, fewer than --gpus " +
                  std::to_string(in.total_gpus));
    }
  }

  auto advice = pd::Advise(in);
  if (!advice.ok()) return fail(advice.error().message());
  if (!svg_path.empty()) {
    std::ofstream out(svg_path, std::ios::binary | std::ios::trunc);
    out << pd::RenderTransferSvg(in);
    if (!out.flush()) return fail(svg_path + ": cannot write");
  }
  const std::string report = json ? pd::FormatAdviceJson(in, *advice) : pd::FormatAdviceTable(in, *advice);
  std::fwrite(report.data(), 1, report.size(), stdout);
  return 0;
}

}  // namespace toposched::cmd
