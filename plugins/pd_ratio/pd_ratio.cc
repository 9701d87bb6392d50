#include "pd_ratio/pd_ratio.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <map>
#include <optional>
#include <utility>

#include "common/plugin_util.h"
#include "common/pool_util.h"
#include "toposched/framework/cluster_view.h"

namespace toposched::plugins::pd_ratio {
namespace {

using framework::kMaxScore;

constexpr int kMaxRatioPart = 100;  // as the toposched.io/pd-ratio annotation

struct Halves {
  int prefill = 0, decode = 0;
};

// What a member (or the pod) adds to its domain, in halves.
Halves Contribution(PodRole role) {
  switch (role) {
    case PodRole::kPrefill:
      return {2, 0};
    case PodRole::kDecode:
      return {0, 2};
    case PodRole::kBoth:
      return {1, 1};
    case PodRole::kNone:
      break;
  }
  return {0, 0};
}

std::string FormatHalves(int halves) {
  return std::to_string(halves / 2) + (halves % 2 != 0 ? ".5" : "");
}

// The pool's counts per domain: built by the first Score call of a cycle, read by the rest.
struct RatioCycle final : framework::StateData {
  std::string neutral;  // non-empty: every node scores 100 with this explanation
  std::string prefix;   // "decode of pool chat, target 1:3 (prefill share 0.25, from the pod)"
  int target_prefill = 0, target_decode = 0;
  std::optional<std::size_t> tier;  // nullopt: no tier configured, every node its own domain
  std::string tier_label;
  std::map<std::string, Halves, std::less<>> by_domain;  // members on nodes labelled for the tier
  std::map<std::string, Halves, std::less<>> by_node;    // members on nodes without the label
};

void Add(Halves& to, Halves h) {
  to.prefill += h.prefill;
  to.decode += h.decode;
}

std::unique_ptr<RatioCycle> BuildCycle(const framework::CycleState& state, const Args& args) {
  auto c = std::make_unique<RatioCycle>();
  const PlacementRequest& req = state.request();
  const std::string role(ToString(req.role));
  if (req.role == PodRole::kNone) {
    c->neutral = "no Prefill/Decode role: neutral -> 100";
    return c;
  }
  if (req.pool.empty()) {
    c->neutral = role + " pod without a pool: neutral -> 100";
    return c;
  }
  std::string source;
  if (req.pd_ratio_prefill > 0 && req.pd_ratio_decode > 0) {
    c->target_prefill = req.pd_ratio_prefill;
    c->target_decode = req.pd_ratio_decode;
    source = "from the pod";
  } else if (args.default_prefill > 0 && args.default_decode > 0) {
    c->target_prefill = args.default_prefill;
    c->target_decode = args.default_decode;
    source = "defaultRatio";
  } else {
    c->neutral = role + " of pool " + req.pool + ": no target ratio (no " + std::string(kPdRatioAnnotation) +
                 " annotation, no defaultRatio): neutral -> 100";
    return c;
  }
  const double s = static_cast<double>(c->target_prefill) / (c->target_prefill + c->target_decode);
  c->prefix = role + " of pool " + req.pool + ", target " + std::to_string(c->target_prefill) + ":" +
              std::to_string(c->target_decode) + " (prefill share " + FormatFixed(s, 2) + ", " + source + ")";
  const framework::ClusterView* cluster = state.cluster();
  if (cluster == nullptr) {
    c->neutral = c->prefix + ": no cluster view in this cycle: neutral -> 100";
    return c;
  }
  const TierChoice tier = ResolveTier(cluster->network(), args.ratio_tier);
  if (!tier.ok) {
    c->neutral = c->prefix + ": ratioTier: " + tier.error + ": neutral -> 100";
    return c;
  }
  c->tier = tier.tier;
  if (c->tier) c->tier_label = cluster->network().tiers[*c->tier].label;
  for (const framework::PoolMember& m : cluster->PoolMembers(req.pool)) {
    if (!req.pod_uid.empty() && m.uid == req.pod_uid) continue;  // the pod itself, when re-scored
    const Halves h = Contribution(m.role);
    if (h.prefill == 0 && h.decode == 0) continue;
    const std::string domain = c->tier ? DomainAt(cluster->Locate(m.node), *c->tier) : std::string();
    Add(domain.empty() ? c->by_node[m.node] : c->by_domain[domain], h);
  }
  return c;
}

}  // namespace

int RatioScore(int target_prefill, int target_decode, int prefill_halves, int decode_halves) {
  const double s = static_cast<double>(target_prefill) / (target_prefill + target_decode);
  const double share = static_cast<double>(prefill_halves) / (prefill_halves + decode_halves);
  const double error = std::abs(share - s);
  return std::clamp(RoundScore(100.0 * (1.0 - error / std::max(s, 1.0 - s))), framework::kMinScore,
                    kMaxScore);
}

Status PdRatio::CheckNetwork(const pd::NetworkConfig& network) const {
  if (const TierChoice tier = ResolveTier(network, args_.ratio_tier); !tier.ok)
    return Error("ratioTier: " + tier.error);
  return Status::Ok();
}

framework::ScoreResult PdRatio::Score(framework::CycleState& state, const framework::NodeInfo& node) const {
  RatioCycle* c = state.ReadAs<RatioCycle>(kCycleKey);
  if (c == nullptr) {
    std::unique_ptr<RatioCycle> built = BuildCycle(state, args_);
    c = built.get();
    state.Write(std::string(kCycleKey), std::move(built));
  }
  // Nothing to say about this pod: out of the total (ScoreResult::counted).
  if (!c->neutral.empty()) return {kMaxScore, c->neutral, /*counted=*/false};

  const PodRole role = state.request().role;
  const std::string domain = c->tier ? DomainAt(state.cluster()->Locate(node.name), *c->tier) : std::string();
  const auto& counts = domain.empty() ? c->by_node : c->by_domain;
  const auto it = counts.find(domain.empty() ? std::string_view(node.name) : std::string_view(domain));
  const Halves before = it == counts.end() ? Halves{} : it->second;
  Halves after = before;
  Add(after, Contribution(role));
  const int score = RatioScore(c->target_prefill, c->target_decode, after.prefill, after.decode);
  if (!state.explain()) return {score, {}};
  const double share = static_cast<double>(after.prefill) / (after.prefill + after.decode);
  const double s = static_cast<double>(c->target_prefill) / (c->target_prefill + c->target_decode);

  std::string where;
  if (!domain.empty()) {
    where = c->tier_label + "=" + domain;
  } else if (c->tier) {
    where = "node " + node.name + " (no " + c->tier_label + " label: its own domain)";
  } else {
    where = "node " + node.name + " (no network tiers: its own domain)";
  }
  std::string why = c->prefix + " in " + where + ": " + FormatHalves(before.prefill) + " prefill, " +
                    FormatHalves(before.decode) + " decode; with this " + std::string(ToString(role)) + " " +
                    FormatHalves(after.prefill) + " prefill, " + FormatHalves(after.decode) +
                    " decode -> share " + FormatFixed(share, 2) + ", error " +
                    FormatFixed(std::abs(share - s), 2) + " of at most " +
                    FormatFixed(std::max(s, 1.0 - s), 2) + " -> " + std::to_string(score);
  return {score, std::move(why)};
}

Result<Args> ParseArgs(const framework::PluginArgs& args) {
  TOPOSCHED_RETURN_IF_ERROR(RequireKnownArgs(args, {"ratioTier", "defaultRatio"}));
  Args out;
  out.ratio_tier = ReadStringArg(args, "ratioTier", "");
  const std::string ratio = ReadStringArg(args, "defaultRatio", "");
  if (ratio.empty()) return out;
  const auto part = [](std::string_view text, int* value) {
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), *value);
    return !text.empty() && ec == std::errc() && end == text.data() + text.size() && *value >= 1 &&
           *value <= kMaxRatioPart;
  };
  const std::size_t colon = ratio.find(':');
  if (colon == std::string::npos || !part(std::string_view(ratio).substr(0, colon), &out.default_prefill) ||
      !part(std::string_view(ratio).substr(colon + 1), &out.default_decode)) {
    return Error("arg defaultRatio: \"" + ratio +
                 "\" is not a Prefill:Decode ratio; write it as \"1:3\" (each side 1 to " +
                 std::to_string(kMaxRatioPart) + "), or \"\" for none");
  }
  return out;
}

Result<std::unique_ptr<framework::Plugin>> New(const framework::PluginArgs& args) {
  TOPOSCHED_ASSIGN_OR_RETURN(Args parsed, ParseArgs(args));
  return AsPlugin(std::make_unique<PdRatio>(std::move(parsed)));
}

}  // namespace toposched::plugins::pd_ratio
