#include "toposched/framework/framework.h"

#include <algorithm>
#include <mutex>
#include <utility>

namespace toposched::framework {
namespace {

struct ScorePluginEntry {
  const ScorePlugin* plugin;
  int weight;
};

// Round half up of num/den for non-negative num and positive den.
int RoundedDivide(long long num, long long den) {
  return static_cast<int>((2 * num + den) / (2 * den));
}

}  // namespace

int ToExtenderScore(int score100) {
  const int clamped = std::clamp(score100, kMinScore, kMaxScore);
  return RoundedDivide(static_cast<long long>(clamped) * kMaxExtenderScore, kMaxScore);
}

// The memo is shared by every cycle of this Framework; PlacementMemo itself is thread-compatible.
struct SharedMemo {
  std::mutex mu;
  PlacementMemo memo;
};

struct Framework::Impl {
  SchedulerConfig config;
  std::vector<std::unique_ptr<Plugin>> owned;
  // Capacity first: the capacity plugin (one of `scorers` when configured, else built here and
  // owned) and its place in `scorers` (-1: not configured, scored on its own).
  const ScorePlugin* capacity = nullptr;
  int capacity_index = -1;
  // A counted Score plugin packs for the typical shapes (CycleState::packs_for_shape_mix).
  bool packs_for_shape_mix = false;
  std::vector<const FilterPlugin*> filters;
  std::vector<ScorePluginEntry> scorers;
  std::vector<const ReservePlugin*> reservers;
  std::unique_ptr<SharedMemo> memo = std::make_unique<SharedMemo>();
};

Framework::Framework(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Framework::Framework(Framework&&) noexcept = default;
Framework& Framework::operator=(Framework&&) noexcept = default;
Framework::~Framework() = default;

Result<Framework> Framework::Create(const SchedulerConfig& config, const Registry& registry) {
  auto impl = std::make_unique<Impl>();
  impl->config = config;
  for (std::size_t i = 0; i < config.plugins.size(); ++i) {
    const PluginConfig& pc = config.plugins[i];
    const std::string path = "plugins[" + std::to_string(i) + "]";
    for (std::size_t j = 0; j < i; ++j) {
      if (config.plugins[j].name == pc.name) return Error(path + ": " + pc.name + " is listed twice");
    }
    if (pc.weight < 0 || pc.weight > kMaxPluginWeight) {
      return Error(path + ".weight: " + std::to_string(pc.weight) + " is out of range 0.." +
                   std::to_string(kMaxPluginWeight));
    }
    TOPOSCHED_ASSIGN_OR_RETURN_CTX(std::unique_ptr<Plugin> plugin, registry.Create(pc.name, pc.args), path);
    if (Status s = plugin->CheckNetwork(config.network); !s.ok()) {
      return s.error().WithContext(path + ".args");
    }
    const Plugin* p = plugin.get();
    if (const auto* f = dynamic_cast<const FilterPlugin*>(p)) impl->filters.push_back(f);
    if (const auto* s = dynamic_cast<const ScorePlugin*>(p)) impl->scorers.push_back({s, pc.weight});
    if (const auto* r = dynamic_cast<const ReservePlugin*>(p)) impl->reservers.push_back(r);
    impl->owned.push_back(std::move(plugin));
  }
  if (const std::string& name = config.capacity.plugin; !name.empty()) {
    for (std::size_t i = 0; i < impl->scorers.size(); ++i) {
      if (impl->scorers[i].plugin->Name() == name) {
        impl->capacity = impl->scorers[i].plugin;
        impl->capacity_index = static_cast<int>(i);
      }
    }
    // Not listed: built with its default args, ranking only.
    if (impl->capacity == nullptr) {
      TOPOSCHED_ASSIGN_OR_RETURN_CTX(std::unique_ptr<Plugin> plugin, registry.Create(name, {}),
                                     "capacity.plugin");
      impl->capacity = dynamic_cast<const ScorePlugin*>(plugin.get());
      if (impl->capacity == nullptr) return Error("capacity.plugin: " + name + " has no Score");
      impl->owned.push_back(std::move(plugin));
    }
  }
  for (const ScorePluginEntry& e : impl->scorers) {
    if (e.weight > 0 && e.plugin->PacksForShapeMix()) impl->packs_for_shape_mix = true;
  }
  if (impl->capacity != nullptr && impl->capacity->PacksForShapeMix()) impl->packs_for_shape_mix = true;
  if (impl->filters.empty()) {
    return Error("plugins: no Filter plugin enabled (enable DeviceFit): nodes would never be checked");
  }
  if (impl->reservers.empty()) {
    return Error("plugins: no Reserve plugin enabled (enable DeviceFit): devices would never be claimed");
  }
  return Framework(std::move(impl));
}

CycleState Framework::NewCycle(PlacementRequest request) const {
  SharedMemo* memo = impl_->memo.get();
  const EngineOptions options = impl_->config.engine;
  CycleState state(std::move(request),
                   [memo, options](const NodeTopology& topology, std::string_view fingerprint,
                                   const NodeAllocation& allocated, const PlacementRequest& req,
                                   SharePacking share_packing) {
                     std::lock_guard<std::mutex> lock(memo->mu);
                     return memo->memo.Place(topology, allocated, req, options, fingerprint, share_packing);
                   });
  state.set_packs_for_shape_mix(impl_->packs_for_shape_mix);
  return state;
}

CycleState Framework::NewCycle(PlacementRequest request, const CycleSetup& setup) const {
  CycleState state = NewCycle(std::move(request));
  state.set_explain(setup.explain);
  state.SetShapeMix(setup.mix);
  if (!setup.packs_by_mix) state.set_packs_for_shape_mix(false);
  state.SetCluster(setup.cluster);
  return state;
}

FilterResult Framework::RunFilter(CycleState& state, const NodeInfo& node) const {
  for (const FilterPlugin* f : impl_->filters) {
    PluginStatus status = f->Filter(state, node);
    if (status.ok()) continue;
    if (status.plugin().empty()) status = status.WithPlugin(std::string(f->Name()));
    return status;
  }
  return PluginStatus::Success();
}

int WeightedTotal(long long weighted, long long weights) {
  return weights == 0 ? 0 : RoundedDivide(weighted, weights);
}

NodeScore Framework::RunScore(CycleState& state, const NodeInfo& node, ScoreSet set) const {
  NodeScore out;
  auto in_set = [set](const ScorePlugin* p) {
    return set == ScoreSet::kAll || p->ReadsCluster() == (set == ScoreSet::kClusterOnly);
  };
  const ScorePlugin* capacity = impl_->capacity;
  if (capacity != nullptr && impl_->capacity_index < 0 && in_set(capacity)) {
    ScoreResult r = capacity->Score(state, node);
    out.capacity = std::clamp(r.score, kMinScore, kMaxScore);
    if (state.explain()) out.capacity_explanation = std::move(r.explanation);
  }
  for (std::size_t i = 0; i < impl_->scorers.size(); ++i) {
    const ScorePluginEntry& e = impl_->scorers[i];
    if (!in_set(e.plugin)) continue;
    const bool is_capacity = static_cast<int>(i) == impl_->capacity_index;
    // A weight-0 part counts for nothing: computed only when the caller wants it explained (or
    // ranks by it: the capacity plugin).
    if (e.weight == 0 && !state.explain() && !is_capacity) continue;
    ScoreResult r = e.plugin->Score(state, node);
    // A score off the scale is a plugin bug; clamp it so one plugin cannot outvote the others.
    const int clamped = std::clamp(r.score, kMinScore, kMaxScore);
    if (clamped != r.score && state.explain())
      r.explanation += " (clamped from " + std::to_string(r.score) + ")";
    if (is_capacity) {
      out.capacity = clamped;
      if (state.explain()) out.capacity_explanation = r.explanation;
      if (e.weight == 0 && !state.explain()) continue;
    }
    if (r.counted) {
      out.weighted += static_cast<long long>(e.weight) * clamped;
      out.weights += e.weight;
    }
    out.parts.push_back(
        ScorePart{std::string(e.plugin->Name()), e.weight, clamped, std::move(r.explanation), r.counted});
  }
  out.total = WeightedTotal(out.weighted, out.weights);
  return out;
}

PluginStatus Framework::RunReserve(CycleState& state, NodeInfo& node) const {
  const auto& reservers = impl_->reservers;
  for (std::size_t i = 0; i < reservers.size(); ++i) {
    PluginStatus status = reservers[i]->Reserve(state, node);
    if (status.ok()) continue;
    for (std::size_t j = i; j-- > 0;) reservers[j]->Unreserve(state, node);
    if (status.plugin().empty()) status = status.WithPlugin(std::string(reservers[i]->Name()));
    return status;
  }
  return PluginStatus::Success();
}

int Framework::CapacityBandWidth() const {
  return impl_->capacity == nullptr ? -1 : impl_->config.capacity.band;
}

bool Framework::RareClassLast() const {
  return impl_->config.capacity.rare_class_last;
}

bool Framework::EvenRemnants() const {
  return impl_->config.capacity.even_remnants;
}

std::string_view Framework::CapacityPluginName() const {
  return impl_->capacity == nullptr ? std::string_view() : impl_->capacity->Name();
}

const SchedulerConfig& Framework::config() const {
  return impl_->config;
}

std::vector<std::string_view> Framework::FilterPluginNames() const {
  std::vector<std::string_view> names;
  for (const auto* p : impl_->filters) names.push_back(p->Name());
  return names;
}
std::vector<std::string_view> Framework::ScorePluginNames() const {
  std::vector<std::string_view> names;
  for (const auto& e : impl_->scorers) names.push_back(e.plugin->Name());
  return names;
}
std::vector<std::string_view> Framework::ReservePluginNames() const {
  std::vector<std::string_view> names;
  for (const auto* p : impl_->reservers) names.push_back(p->Name());
  return names;
}
std::string ExplainScore(const NodeScore& score) {
  std::string sum;
  int weights = 0;
  for (const ScorePart& p : score.parts) {
    if (p.weight == 0 || !p.counted) continue;
    sum += (sum.empty() ? "" : " + ") + std::to_string(p.weight) + "*" + std::to_string(p.score);
    weights += p.weight;
  }
  std::string out = "total " + std::to_string(score.total);
  out += weights == 0 ? " (no weighted score)" : " = (" + sum + ") / " + std::to_string(weights);
  for (const ScorePart& p : score.parts) {
    out += "; " + p.plugin + " " + std::to_string(p.score) + " x" + std::to_string(p.weight) +
           (p.counted ? ": " : " (not counted): ") + p.explanation;
  }
  if (score.capacity >= 0) {
    out += "; capacity " + std::to_string(score.capacity) + " (ranks first)";
    const bool shown = std::any_of(score.parts.begin(), score.parts.end(), [&](const ScorePart& p) {
      return p.explanation == score.capacity_explanation;
    });
    if (!shown && !score.capacity_explanation.empty()) out += ": " + score.capacity_explanation;
  }
  return out;
}

std::string ExplainNode(std::string_view node_name, const FilterResult& filter, const NodeScore* score) {
  std::string out(node_name);
  if (!filter.ok()) {
    out += ": filtered out by " + (filter.plugin().empty() ? std::string("?") : filter.plugin()) + " (" +
           std::string(ToString(filter.code())) + "): " + filter.reason();
    return out;
  }
  out += ": fits";
  if (score != nullptr) out += "; " + ExplainScore(*score);
  return out;
}

}  // namespace toposched::framework
