// `toposched advise`: the analytic co-located vs disaggregated estimate of advise.h, its
// queueing model and the verdict. Every formula and default is derived in docs/advise.md; the
// comments here state what each function computes and why, not the derivation again. The
// length distributions are in advise_dist.cc, the GPU presets in advise_presets.cc, the report
// formats in advise_format.cc.

#include "toposched/pd/advise.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>

#include "advise_internal.h"

namespace toposched::pd {

namespace advise_internal {

std::vector<PathKind> PathsOf(const AdviseInput& in) {
  if (!in.paths.empty()) return in.paths;
  std::vector<PathKind> out = {in.network.same_node_ipc ? PathKind::kSameNodeIpc : PathKind::kSameNodeRdma};
  for (const Tier& t : in.network.tiers) {
    if (std::find(out.begin(), out.end(), t.path) == out.end()) out.push_back(t.path);
  }
  return out;
}

std::pair<Endpoint, Endpoint> EndpointsOf(const AdviseInput& in) {
  if (!in.paths.empty()) return {in.prefill_end, in.decode_end};
  Endpoint e;
  e.gpus = in.gpus_per_instance;
  e.rdma_nics = in.gpus_per_instance;
  e.worst_class = LinkClass::kPIX;
  return {e, e};
}

}  // namespace advise_internal

namespace {

using advise_internal::EndpointsOf;
using advise_internal::Fmt;
using advise_internal::Ms;
using advise_internal::PathsOf;
using advise_internal::Pct;
using advise_internal::Ratio;
using advise_internal::Rps;

// Fixed cost of one prefill on top of its FLOPs (scheduling, tokenizer hand-off, kernel
// launches, the first sampling step): an assumption, docs/advise.md.
constexpr double kPrefillOverheadS = 0.005;
// Share of HBM the serving engine may use (vLLM's gpu_memory_utilization default): weights
// plus the KV cache must fit in it.
constexpr double kMemoryUtilisation = 0.9;
// The verdict's margins: disaggregation must sustain this much more to be worth its transfer;
// the verdict is checked against MFU and transfer cost scaled by 1 -+ this.
constexpr double kClearlyMore = 0.10;
constexpr double kSensitivity = 0.30;
// A prefill stall enters the P99 TPOT once more than 1% of decode steps see a prefill arrive.
constexpr double kTailShare = 0.01;
constexpr int kMaxInstances = 4096;

// ------------------------------------------------------------------------------------------
// The model

// What the analysis may vary for its sensitivity check.
struct Knobs {
  double mfu_scale = 1;
  double transfer_scale = 1;
};

// Everything the estimate derives once from the input (docs/advise.md, "The model").
struct Derived {
  int instances = 0;  // N = total_gpus / gpus_per_instance
  double seconds_per_prompt_token = 0;
  double step_base_s = 0;         // a: weights read once per decode step
  double step_per_seq_s = 0;      // b: one sequence's KV read per step
  double step_compute_s = 0;      // c: one sequence's token of compute (a step is max(a + bB, cB))
  double kv_capacity_tokens = 0;  // per instance
  double context_tokens = 0;      // mean KV length of a sequence being decoded
  double output_mean = 0;
  double prefill_mean_s = 0, prefill_second_moment = 0;  // E[S], E[S^2]
  double prompt_p99 = 0, prompt_mean = 0;
  double kv_bytes_per_token = 0;

  double PrefillSeconds(double tokens) const { return kPrefillOverheadS + tokens * seconds_per_prompt_token; }
  double StepSeconds(double batch) const {
    return std::max(step_base_s + batch * step_per_seq_s, batch * step_compute_s);
  }
};

Derived Derive(const AdviseInput& in, const Knobs& knobs) {
  Derived d;
  const int g = in.gpus_per_instance;
  d.instances = in.total_gpus / g;
  const double params = in.model.params_billion * 1e9;
  const double flops = g * in.gpu.peak_tflops * 1e12 * in.gpu.mfu * knobs.mfu_scale;
  d.seconds_per_prompt_token = 2.0 * params / flops;
  const double bandwidth = g * in.gpu.hbm_gbps * 1e9 * in.gpu.mbu;
  const double weights = params * in.model.dtype_bytes;
  d.kv_bytes_per_token = static_cast<double>(KvBytesPerToken(in.model));
  d.step_base_s = weights / bandwidth;
  d.step_compute_s = d.seconds_per_prompt_token;  // 2 * params FLOPs per token at the same MFU
  // A sequence of the batch has on average its prompt plus half its output in the KV cache,
  // weighted by how long it stays (its output length): E[P] + E[O^2] / (2 E[O]).
  d.output_mean = in.output.Mean();
  double out_sq = 0, s1 = 0, s2 = 0;
  for (std::size_t i = 0; i < in.output.quantiles.size(); ++i)
    out_sq += in.output.quantiles[i] * in.output.quantiles[i];
  out_sq /= static_cast<double>(in.output.quantiles.size());
  d.prompt_mean = in.prompt.Mean();
  d.prompt_p99 = in.prompt.Quantile(0.99);
  d.context_tokens = d.prompt_mean + out_sq / (2.0 * d.output_mean);
  d.step_per_seq_s = d.context_tokens * d.kv_bytes_per_token / bandwidth;
  d.kv_capacity_tokens =
      std::max(0.0, g * in.gpu.hbm_gib * 1073741824.0 * kMemoryUtilisation - weights) / d.kv_bytes_per_token;
  for (double l : in.prompt.quantiles) {
    const double s = d.PrefillSeconds(l);
    s1 += s;
    s2 += s * s;
  }
  d.prefill_mean_s = s1 / static_cast<double>(in.prompt.quantiles.size());
  d.prefill_second_moment = s2 / static_cast<double>(in.prompt.quantiles.size());
  return d;
}

// M/G/1 (Pollaczek-Khinchine) for one instance's prefill queue; the P99 wait from the
// exponential tail P(W > t) = rho * exp(-t * rho / Wq) (exact for M/M/1, the usual
// approximation otherwise).
struct Queue {
  double rho = 0, wait_mean_s = 0, wait_p99_s = 0;
  bool stable = true;
};
Queue PrefillQueue(double lambda, const Derived& d) {
  Queue q;
  q.rho = lambda * d.prefill_mean_s;
  if (q.rho >= 1) {
    q.stable = false;
    q.wait_mean_s = q.wait_p99_s = std::numeric_limits<double>::infinity();
    return q;
  }
  q.wait_mean_s = lambda * d.prefill_second_moment / (2.0 * (1.0 - q.rho));
  q.wait_p99_s = q.rho > kTailShare ? q.wait_mean_s / q.rho * std::log(q.rho / kTailShare) : 0.0;
  return q;
}

// Continuous batching: the batch B that Little's law gives when every decode step takes
// step(B) / (1 - rho) (co-located: prefills take rho of the time), B = lambda * O * step(B) /
// (1 - rho). On the bandwidth line a + bB that is linear in B, so closed form; the compute
// line cB passes through 0, so it only bounds stability (lambda * O * c / (1 - rho) < 1: the
// tokens asked per second within the FLOPs). nullopt: the batch grows without bound.
std::optional<double> DecodeBatch(double lambda, double prefill_share, const Derived& d) {
  const double slow = 1.0 / (1.0 - prefill_share);
  const double x = lambda * d.output_mean * d.step_per_seq_s * slow;
  if (x >= 1 || lambda * d.output_mean * d.step_compute_s * slow >= 1) return std::nullopt;
  return lambda * d.output_mean * d.step_base_s * slow / (1.0 - x);
}

double Headroom(const AdviseInput& in, double ttft_s, double tpot_s) {
  return std::min(1.0 - ttft_s * 1000.0 / in.ttft_p99_ms, 1.0 - tpot_s * 1000.0 / in.tpot_p99_ms);
}

struct Evaluated {
  OptionEstimate option;
  double headroom = -std::numeric_limits<double>::infinity();
  std::string limit;  // what breaks first, when it does not meet
  double stall_s = 0, arrivals_per_step = 0;
  double overload = 0;  // unstable splits: the busier side's load (utilisation, KV fill)
};

void Finish(const AdviseInput& in, Evaluated& e) {
  OptionEstimate& o = e.option;
  if (!o.stable) {
    o.meets_slo = false;
    return;
  }
  e.headroom = Headroom(in, o.ttft_p99_ms / 1000.0, o.tpot_p99_ms / 1000.0);
  o.meets_slo = e.headroom >= 0;
  if (!o.meets_slo) {
    const bool ttft = o.ttft_p99_ms > in.ttft_p99_ms, tpot = o.tpot_p99_ms > in.tpot_p99_ms;
    e.limit = ttft && tpot ? "TTFT and TPOT over target" : ttft ? "TTFT over target" : "TPOT over target";
  }
}

Evaluated CoLocated(const AdviseInput& in, const Derived& d, double rate) {
  Evaluated e;
  OptionEstimate& o = e.option;
  o.name = "co-located";
  o.prefill_instances = o.decode_instances = d.instances;
  const double lambda = rate / d.instances;
  const Queue q = PrefillQueue(lambda, d);
  o.prefill_utilisation = q.rho;
  const std::optional<double> batch = q.stable ? DecodeBatch(lambda, q.rho, d) : std::nullopt;
  if (!q.stable || !batch) {
    o.stable = false;
    e.limit = !q.stable ? "prefill queue unstable (utilisation >= 1)" : "decode batch grows without bound";
    return e;
  }
  o.decode_batch = *batch;
  if (*batch * d.context_tokens > d.kv_capacity_tokens) {
    o.stable = false;
    e.limit = "KV cache over capacity";
    return e;
  }
  const double step = d.StepSeconds(*batch);
  o.tpot_mean_ms = step / (1.0 - q.rho) * 1000.0;
  // Inter-token gaps: a step sees a prefill arrive with probability p = lambda * step; such a
  // gap is step + S_p(L) for the arriving prompt L, so the P99 gap is the stall of the prompt
  // at quantile 1 - 0.01 / p (the P99 prompt when every step sees one).
  e.arrivals_per_step = lambda * step;
  const double p = std::min(1.0, e.arrivals_per_step);
  double tpot_p99 = step / (1.0 - q.rho);
  if (p > kTailShare) {
    e.stall_s = d.PrefillSeconds(in.prompt.Quantile(1.0 - kTailShare / p));
    tpot_p99 = std::max(tpot_p99, step + e.stall_s);
  }
  o.tpot_p99_ms = tpot_p99 * 1000.0;
  // TTFT: the P99 queue wait, the P99 prompt's prefill, and the decode step in flight when it
  // arrived (prefills wait for the step boundary).
  o.ttft_p99_ms = (q.wait_p99_s + d.PrefillSeconds(d.prompt_p99) + step) * 1000.0;
  Finish(in, e);
  return e;
}

Evaluated Disaggregated(const AdviseInput& in, const Derived& d, double rate, int prefill_instances,
                        const PathEstimate& path, const Knobs& knobs) {
  Evaluated e;
  OptionEstimate& o = e.option;
  o.name = "disaggregated over " + std::string(ToString(path.path));
  o.path = path.path;
  o.prefill_instances = prefill_instances;
  o.decode_instances = d.instances - prefill_instances;
  o.kv_transfer_ms_mean =
      TransferSeconds(path, d.prompt_mean * d.kv_bytes_per_token) * knobs.transfer_scale * 1000.0;
  o.kv_transfer_ms_p99 =
      TransferSeconds(path, d.prompt_p99 * d.kv_bytes_per_token) * knobs.transfer_scale * 1000.0;
  if (o.prefill_instances < 1 || o.decode_instances < 1) {
    o.stable = false;
    e.limit = "needs at least 2 instances";
    return e;
  }
  const Queue q = PrefillQueue(rate / o.prefill_instances, d);
  o.prefill_utilisation = q.rho;
  const double decode_load =
      rate / o.decode_instances * d.output_mean * std::max(d.step_per_seq_s, d.step_compute_s);
  const std::optional<double> batch = DecodeBatch(rate / o.decode_instances, 0.0, d);
  e.overload = std::max(q.rho, decode_load);
  if (!q.stable || !batch) {
    o.stable = false;
    e.limit = !q.stable ? "prefill queue unstable (utilisation >= 1)" : "decode batch grows without bound";
    return e;
  }
  o.decode_batch = *batch;
  if (*batch * d.context_tokens > d.kv_capacity_tokens) {
    o.stable = false;
    e.overload = std::max(q.rho, *batch * d.context_tokens / d.kv_capacity_tokens);
    e.limit = "KV cache over capacity";
    return e;
  }
  const double step = d.StepSeconds(*batch);
  o.tpot_mean_ms = o.tpot_p99_ms = step * 1000.0;
  // TTFT: queue wait, prefill, the KV transfer, and one decode step (the decode instance
  // emits the first token at its next step).
  o.ttft_p99_ms = (q.wait_p99_s + d.PrefillSeconds(d.prompt_p99) + step) * 1000.0 + o.kv_transfer_ms_p99;
  o.kv_share_of_ttft = o.kv_transfer_ms_p99 / o.ttft_p99_ms;
  Finish(in, e);
  return e;
}

// Stable splits beat unstable ones; then the larger min headroom; ties: fewer prefill.
bool Better(const Evaluated& a, const Evaluated& b) {
  if (a.option.stable != b.option.stable) return a.option.stable;
  if (!a.option.stable) return a.overload < b.overload;  // both unstable: the less overloaded
  if (a.headroom != b.headroom) return a.headroom > b.headroom;
  return a.option.prefill_instances < b.option.prefill_instances;
}

Evaluated BestSplit(const AdviseInput& in, const Derived& d, double rate, const PathEstimate& path,
                    const Knobs& knobs) {
  if (d.instances < 2) return Disaggregated(in, d, rate, 0, path, knobs);
  Evaluated best = Disaggregated(in, d, rate, 1, path, knobs);
  for (int np = 2; np < d.instances; ++np) {
    Evaluated e = Disaggregated(in, d, rate, np, path, knobs);
    if (Better(e, best)) best = std::move(e);
  }
  return best;
}

// The highest rate that still meets both SLOs, by bisection (each side's figures only worsen
// with the rate). Every option is unstable past N / E[S_p]: all prefill capacity in use.
template <typename Meets>
double MaxRate(const Derived& d, Meets meets) {
  double lo = 0, hi = d.instances / d.prefill_mean_s;
  if (!meets(hi * 1e-6)) return 0;
  lo = hi * 1e-6;
  for (int i = 0; i < 60 && hi - lo > 1e-6 * hi; ++i) {
    const double mid = 0.5 * (lo + hi);
    (meets(mid) ? lo : hi) = mid;
  }
  return lo;
}

enum class VerdictKind { kCoLocate, kDisaggregate, kNeither };

struct Analysis {
  Derived derived;
  std::vector<Evaluated> options;  // co-located first, then each path
  VerdictKind kind = VerdictKind::kNeither;
  std::size_t best_disagg = 0;  // index into options (0 = none)
};

Analysis Analyse(const AdviseInput& in, const Knobs& knobs) {
  Analysis a;
  a.derived = Derive(in, knobs);
  const Derived& d = a.derived;
  a.options.push_back(CoLocated(in, d, in.rate_rps));
  a.options[0].option.max_rate_rps =
      MaxRate(d, [&](double r) { return CoLocated(in, d, r).option.meets_slo; });
  const auto [pe, de] = EndpointsOf(in);
  for (PathKind p : PathsOf(in)) {
    const PathEstimate est = Estimate(in.network, p, pe, de);
    Evaluated e = BestSplit(in, d, in.rate_rps, est, knobs);
    e.option.max_rate_rps =
        MaxRate(d, [&](double r) { return BestSplit(in, d, r, est, knobs).option.meets_slo; });
    a.options.push_back(std::move(e));
  }
  // The best disaggregated option: meets at this rate first, then the highest max rate; within
  // 0.5%: the lower P99 TTFT (the cheaper transfer).
  for (std::size_t i = 1; i < a.options.size(); ++i) {
    if (a.best_disagg == 0) {
      a.best_disagg = i;
      continue;
    }
    const OptionEstimate& c = a.options[i].option;
    const OptionEstimate& b = a.options[a.best_disagg].option;
    const bool more = c.max_rate_rps > b.max_rate_rps * 1.005,
               same = !more && c.max_rate_rps >= b.max_rate_rps * 0.995;
    if (c.meets_slo != b.meets_slo ? c.meets_slo : more || (same && c.ttft_p99_ms < b.ttft_p99_ms))
      a.best_disagg = i;
  }
  const OptionEstimate& co = a.options[0].option;
  const OptionEstimate* dis = a.best_disagg ? &a.options[a.best_disagg].option : nullptr;
  if (co.meets_slo &&
      (!dis || !dis->meets_slo || dis->max_rate_rps <= co.max_rate_rps * (1 + kClearlyMore))) {
    a.kind = VerdictKind::kCoLocate;
  } else if (dis && dis->meets_slo) {
    a.kind = VerdictKind::kDisaggregate;
  } else {
    a.kind = VerdictKind::kNeither;
  }
  return a;
}

std::string_view KindWord(VerdictKind k) {
  switch (k) {
    case VerdictKind::kCoLocate:
      return "co-locate";
    case VerdictKind::kDisaggregate:
      return "disaggregate";
    case VerdictKind::kNeither:
      return "neither meets the SLO";
  }
  return "";
}

}  // namespace

// ------------------------------------------------------------------------------------------
// The advice

Result<Advice> Advise(const AdviseInput& in) {
  const ModelSpec& m = in.model;
  if (m.layers <= 0 || m.kv_heads <= 0 || m.head_dim <= 0 || m.dtype_bytes <= 0)
    return Error("model: layers, kv heads, head dim and dtype bytes must be positive");
  if (!(m.params_billion > 0)) return Error("model: the parameter count must be positive");
  const GpuProfile& g = in.gpu;
  if (!(g.peak_tflops > 0) || !(g.hbm_gbps > 0) || !(g.hbm_gib > 0))
    return Error("gpu " + g.name + ": peak TFLOPS, HBM bandwidth and memory must be positive");
  if (!(g.mfu > 0 && g.mfu <= 1) || !(g.mbu > 0 && g.mbu <= 1))
    return Error("gpu: MFU and MBU must be in (0, 1]");
  if (in.gpus_per_instance < 1) return Error("gpus per instance must be at least 1");
  if (in.total_gpus < 1) return Error("the total GPU count must be at least 1");
  if (in.total_gpus < in.gpus_per_instance) {
    return Error("an instance of " + std::to_string(in.gpus_per_instance) + " GPUs does not fit in " +
                 std::to_string(in.total_gpus) + " GPUs");
  }
  if (in.total_gpus / in.gpus_per_instance > kMaxInstances)
    return Error("more than " + std::to_string(kMaxInstances) + " instances");
  if (in.prompt.quantiles.empty() || in.output.quantiles.empty())
    return Error("prompt and output length distributions are required");
  if (!(in.rate_rps > 0) || !std::isfinite(in.rate_rps)) return Error("the request rate must be positive");
  if (!(in.ttft_p99_ms > 0) || !(in.tpot_p99_ms > 0)) return Error("TTFT and TPOT targets must be positive");
  if (Status s = Validate(in.network); !s.ok()) return Error("network: " + s.error().message());
  const double weights_gib = m.params_billion * 1e9 * m.dtype_bytes / 1073741824.0;
  if (weights_gib >= in.gpus_per_instance * g.hbm_gib * kMemoryUtilisation) {
    return Error(Fmt("the weights (%.0f GiB) do not fit ", weights_gib) +
                 std::to_string(in.gpus_per_instance) + " x " + g.name +
                 Fmt(" (%.0f GiB usable): use more GPUs per instance",
                     in.gpus_per_instance * g.hbm_gib * kMemoryUtilisation));
  }

  const Analysis a = Analyse(in, {});
  const Derived& d = a.derived;
  Advice out;
  out.kv_bytes_per_token = d.kv_bytes_per_token;
  for (const Evaluated& e : a.options) out.options.push_back(e.option);
  const Evaluated& co = a.options[0];
  const Evaluated* dis = a.best_disagg ? &a.options[a.best_disagg] : nullptr;
  const Evaluated* worst = a.options.size() > 1 ? &a.options.back() : nullptr;
  const int n = d.instances;

  // Verdict.
  switch (a.kind) {
    case VerdictKind::kCoLocate:
      out.verdict = "co-locate: " + std::to_string(n) +
                    " instances serving both phases meet TTFT and TPOT at " + Rps(in.rate_rps) + " (up to " +
                    Rps(co.option.max_rate_rps) + ")";
      break;
    case VerdictKind::kDisaggregate:
      out.verdict = "disaggregate over " + std::string(ToString(dis->option.path)) + " at P:D " +
                    Ratio(dis->option) + ": meets TTFT and TPOT at " + Rps(in.rate_rps) + " (up to " +
                    Rps(dis->option.max_rate_rps) + "; co-located " +
                    (co.option.meets_slo ? "up to " + Rps(co.option.max_rate_rps) : "does not meet them") +
                    ")";
      break;
    case VerdictKind::kNeither:
      out.verdict = "neither meets the SLO at " + Rps(in.rate_rps) + ": co-located " +
                    (co.limit.empty() ? "fails" : co.limit) + " (meets up to " + Rps(co.option.max_rate_rps) +
                    ")";
      if (dis) {
        out.verdict += "; disaggregated " + (dis->limit.empty() ? std::string("fails") : dis->limit) +
                       " (meets up to " + Rps(dis->option.max_rate_rps) + ")";
      }
      break;
  }

  // Reasons, with the numbers used.
  std::vector<std::string>& r = out.reasons;
  r.push_back(Fmt("KV cache: %.0f KiB per token", d.kv_bytes_per_token / 1024.0) +
              Fmt("; mean prompt %.0f tokens", d.prompt_mean) +
              Fmt(" = %.1f MiB", d.prompt_mean * d.kv_bytes_per_token / 1048576.0) +
              Fmt(", P99 prompt %.0f tokens", d.prompt_p99) +
              Fmt(" = %.1f MiB", d.prompt_p99 * d.kv_bytes_per_token / 1048576.0));
  r.push_back("per instance (" + std::to_string(in.gpus_per_instance) + " x " + g.name + "): prefill " +
              Fmt("%.1f us/token", d.seconds_per_prompt_token * 1e6) + " + " + Ms(kPrefillOverheadS) +
              ", P99 prompt " + Ms(d.PrefillSeconds(d.prompt_p99)) + "; decode step " + Ms(d.step_base_s) +
              " + " + Fmt("%.3f ms", d.step_per_seq_s * 1000.0) + " per sequence in the batch");
  {
    const OptionEstimate& o = co.option;
    std::string line = "co-located (" + std::to_string(n) + " instances, " +
                       Fmt("%.2f rps each", in.rate_rps / n) + "): prefill utilisation " +
                       Pct(o.prefill_utilisation);
    if (o.stable) {
      line += Fmt(", decode batch %.1f", o.decode_batch) + ", " + Fmt("%.1f%%", 100 * co.arrivals_per_step) +
              " of decode steps see a prefill arrive";
      line += co.arrivals_per_step > kTailShare
                  ? " (> 1%: a prefill stall of " + Ms(co.stall_s) + " lands in the P99 TPOT)"
                  : " (<= 1%: no prefill stall in the P99 TPOT)";
    } else {
      line += ": " + co.limit;
    }
    r.push_back(line);
  }
  if (dis) {
    const OptionEstimate& o = dis->option;
    std::string line = "disaggregated over " + std::string(ToString(o.path)) + " at P:D " + Ratio(o) +
                       ": KV transfer " + Fmt("%.1f ms", o.kv_transfer_ms_mean) + " mean, " +
                       Fmt("%.1f ms", o.kv_transfer_ms_p99) + " P99";
    if (o.stable) {
      line += " (" + Pct(o.kv_share_of_ttft) + " of the P99 TTFT), prefill utilisation " +
              Pct(o.prefill_utilisation) + " on " + std::to_string(o.prefill_instances) + " of " +
              std::to_string(n) + " instances" + Fmt(", decode batch %.1f", o.decode_batch) +
              ", no prefill stalls";
    } else {
      line += ": " + dis->limit;
    }
    r.push_back(line);
    if (worst && worst != dis && worst->option.path != o.path) {
      r.push_back("over the costliest path of this cluster (" + std::string(ToString(worst->option.path)) +
                  ", where a topology-unaware router may pair P and D) the P99 transfer is " +
                  Fmt("%.1f ms", worst->option.kv_transfer_ms_p99) + " and the option " +
                  (worst->option.meets_slo ? "still meets" : "does not meet") + " the SLO");
    }
  }
  if (a.kind == VerdictKind::kCoLocate && dis) {
    if (co.arrivals_per_step <= kTailShare)
      r.push_back("at this rate prefills rarely interrupt decoding: nothing for disaggregation to remove");
    if (dis->option.stable)
      r.push_back("disaggregation adds " + Fmt("%.1f ms", dis->option.kv_transfer_ms_p99) +
                  " of KV transfer to the P99 TTFT and leaves prefill " +
                  std::to_string(dis->option.prefill_instances) + " of " + std::to_string(n) +
                  " instances (prefill utilisation " + Pct(dis->option.prefill_utilisation) + " vs " +
                  Pct(co.option.prefill_utilisation) + " co-located)");
    r.push_back("max sustainable rate: co-located " + Rps(co.option.max_rate_rps) + ", disaggregated " +
                Rps(dis->option.max_rate_rps) + " (disaggregation must sustain > 10% more to be worth it)");
  } else if (a.kind == VerdictKind::kDisaggregate) {
    if (!co.option.meets_slo)
      r.push_back("co-located misses: " + co.limit + Fmt(" (P99 TTFT %.0f ms", co.option.ttft_p99_ms) +
                  Fmt(", P99 TPOT %.0f ms", co.option.tpot_p99_ms) + ")");
    r.push_back("max sustainable rate: disaggregated " + Rps(dis->option.max_rate_rps) + ", co-located " +
                Rps(co.option.max_rate_rps));
  }

  // Where the estimate is weak.
  std::vector<std::string>& u = out.uncertain;
  u.push_back(Fmt("MFU %.2f (prefill) and ", g.mfu) + Fmt("MBU %.2f (decode) are assumptions", g.mbu) +
              ", not measurements; peak FLOPS and HBM bandwidth are datasheet figures");
  u.push_back("no chunked prefill modelled (it trades prefill stalls for longer TTFT and narrows the gap)");
  u.push_back("no prefix caching (a cache hit removes prefill work and, disaggregated, the transfer)");
  u.push_back("attention FLOPs, quantised weights, speculative decoding and CUDA graphs are not modelled");
  u.push_back(
      "queueing is M/G/1 per instance with Poisson arrivals and perfect load balance; P99s of wait and "
      "prefill are added (conservative)");
  u.push_back(
      "TPOT P99 is the P99 inter-token gap a streaming client sees; per-request mean TPOT (vLLM's "
      "benchmark figure) is lower for co-located serving");
  u.push_back("network costs are " +
              std::string(in.network == NetworkConfig{} ? "the defaults (assumptions)" : "from the config") +
              "; routers are assumed topology-unaware unless P and D are placed within one path");
  if (n * in.gpus_per_instance != in.total_gpus)
    u.push_back(std::to_string(in.total_gpus - n * in.gpus_per_instance) +
                " GPUs left over (not a multiple of " + std::to_string(in.gpus_per_instance) + ")");
  for (const Evaluated* e : {&co, dis}) {
    if (e && e->option.stable && e->option.prefill_utilisation > 0.8)
      u.push_back(e->option.name + ": prefill utilisation " + Pct(e->option.prefill_utilisation) +
                  ", where queueing delay is very sensitive to every input");
  }
  if (dis && co.option.max_rate_rps > 0 &&
      std::abs(dis->option.max_rate_rps / co.option.max_rate_rps - 1) <= kClearlyMore)
    u.push_back("the two options' max sustainable rates are within 10%: a close call");
  bool flips = false;
  for (const auto& [what, knobs] : std::vector<std::pair<std::string, Knobs>>{
           {Fmt("MFU -%.0f%%", 100 * kSensitivity), {1 - kSensitivity, 1}},
           {Fmt("MFU +%.0f%%", 100 * kSensitivity), {1 + kSensitivity, 1}},
           {Fmt("KV transfer cost -%.0f%%", 100 * kSensitivity), {1, 1 - kSensitivity}},
           {Fmt("KV transfer cost +%.0f%%", 100 * kSensitivity), {1, 1 + kSensitivity}}}) {
    if (knobs.mfu_scale * g.mfu > 1) continue;
    const Analysis alt = Analyse(in, knobs);
    if (alt.kind == a.kind) continue;
    flips = true;
    u.push_back("the verdict flips with " + what + ": it becomes '" + std::string(KindWord(alt.kind)) + "'");
  }
  if (!flips) u.push_back("the verdict holds with MFU and the KV transfer cost each -+30%");
  return out;
}

}  // namespace toposched::pd
