#pragma once
// PdRatio: keeps a Prefill/Decode pool's instance ratio close to its target in every network
// domain (a leaf by default), so that each domain's Decode instances find enough Prefill
// instances near them and the KV transfers stay inside the domain (llm-d's P/D disaggregation;
// the KV-transfer side is KvTransferCost).

#include <memory>
#include <string>
#include <string_view>

#include "toposched/common/status.h"
#include "toposched/framework/plugin.h"
#include "toposched/framework/registry.h"

namespace toposched::plugins::pd_ratio {

inline constexpr std::string_view kName = "PdRatio";
inline constexpr int kDefaultWeight = 2;
inline constexpr std::string_view kCycleKey = "PdRatio/pool";

struct Args {
  // The tier whose domains keep the ratio (a network tier label); "" = the first tier whose path
  // is leaf, else tier 0.
  std::string ratio_tier;
  // The target when the pod has no toposched.io/pd-ratio annotation; 0:0 = none (neutral).
  int default_prefill = 0, default_decode = 0;
};

// Args (all optional): ratioTier, defaultRatio ("P:D", each 1..100; "" = none). Unknown keys are
// errors.
Result<Args> ParseArgs(const framework::PluginArgs& args);

// Score, for a pod with role prefill, decode or both and a pool, with a target p:d (the pod's
// annotation, else defaultRatio) and a cluster view in the cycle. In the node's domain at the
// ratio tier, P and D count the pool's members (role both counts half to each, as it serves
// both; role none counts nothing), then the pod is added the same way:
//
//   s      = p / (p + d)                       the target Prefill share
//   share' = P' / (P' + D')                    the share with this pod added
//   score  = round(100 * (1 - |share' - s| / max(s, 1 - s)))
//
// max(s, 1 - s) is the largest error possible, so a domain made all of the wrong role scores 0.
// A node without a label for the ratio tier is a domain of its own (it shares no domain with
// anyone, as in pd::Distance); so is every node when no tier is configured.
// Pods with role none, without a pool or a target, and cycles without a cluster view, score a
// neutral 100 saying why; so does every node when ratioTier names a tier the network config lacks.
class PdRatio final : public framework::ScorePlugin {
 public:
  explicit PdRatio(Args args) : args_(std::move(args)) {}
  std::string_view Name() const override { return kName; }
  // ratioTier, when given, must be a configured tier.
  Status CheckNetwork(const pd::NetworkConfig& network) const override;
  framework::ScoreResult Score(framework::CycleState& state, const framework::NodeInfo& node) const override;
  bool ReadsCluster() const override { return true; }

 private:
  Args args_;
};

// The formula above, with counts in halves (role both adds one half to each side).
// Requires prefill_halves + decode_halves > 0 and p, d > 0.
int RatioScore(int target_prefill, int target_decode, int prefill_halves, int decode_halves);

Result<std::unique_ptr<framework::Plugin>> New(const framework::PluginArgs& args);

}  // namespace toposched::plugins::pd_ratio
