#pragma once
// `toposched advise`: should this model, under this workload, on this cluster, be served with
// Prefill and Decode co-located or disaggregated, and at which P:D ratio? An analytic estimate
// (docs/advise.md derives every formula and default), not a measurement: the result says
// where it is uncertain.
//
// The model, per instance of g = `gpus_per_instance` GPUs (tensor parallel), N = total / g:
//   prefill time   S_p(L)  = 5 ms + L * 2 * params / (g * peak_flops * mfu)        (compute bound)
//   decode step    step(B) = max((weights + B * ctx * kv_bytes_per_token) / (g * hbm_bw * mbu),
//                                B * 2 * params / (g * peak_flops * mfu))
//   decode batch   Little's law, B = lambda * E[O] * step(B) / (1 - rho_p)  (closed form)
//   prefill queue  M/G/1 per instance (Pollaczek-Khinchine), P99 wait from the exponential tail
//   co-located: prefills preempt decode steps. TTFT p99 = wait p99 + S_p(P99 prompt) + step;
//     TPOT mean = step(B) / (1 - rho_p); TPOT p99 (the P99 inter-token gap) includes one
//     prefill stall when more than 1% of decode steps see a prefill arrive (p = lambda * step >
//     0.01): the stall of the prompt at quantile 1 - 0.01 / p (the P99 prompt when p = 1).
//   disaggregated: N_p prefill + N_d decode instances (N_p + N_d = N), the split chosen to meet
//     both SLOs with the largest min headroom (ties: fewer prefill); TTFT adds the KV transfer
//     along the path (network.h, with its connector overhead) and one decode step; TPOT =
//     step(B_d), no prefill stalls.
// Each option's p99 comes from the prompt/output length distributions (their quantiles), not
// from a closed form of the whole distribution. Unstable queues never meet the SLO.

#include <string>
#include <string_view>
#include <vector>

#include "toposched/common/status.h"
#include "toposched/pd/network.h"

namespace toposched::pd {

// Token lengths: "fixed:N", "uniform:A-B", "lognormal:MEDIAN,SIGMA" (natural log sigma),
// "list:a,b,c" (samples). Held as 1000 quantiles (deterministic, no RNG).
struct LengthDist {
  std::string spec;
  std::vector<double> quantiles;  // ascending
  double Mean() const;
  double Quantile(double q) const;  // q in [0, 1]
};
Result<LengthDist> ParseLengthDist(std::string_view spec);

struct GpuProfile {
  std::string name = "h100-sxm";
  double peak_tflops = 989;  // dense BF16 (NVIDIA H100 SXM datasheet)
  double hbm_gbps = 3350;    // GB/s (datasheet)
  double hbm_gib = 80;
  double mfu = 0.5;  // prefill model-FLOPs utilisation: an assumption, see docs
  double mbu = 0.7;  // decode memory-bandwidth utilisation: an assumption, see docs
};
const std::vector<GpuProfile>& GpuPresets();  // h100-sxm, a100-sxm-80g, h200-sxm, l40s
Result<GpuProfile> FindGpu(std::string_view name);

struct AdviseInput {
  ModelSpec model;
  GpuProfile gpu;
  int gpus_per_instance = 8;
  int total_gpus = 16;  // the GPUs this model may use, both phases together
  LengthDist prompt, output;
  double rate_rps = 1;  // requests per second, the whole service
  double ttft_p99_ms = 1000, tpot_p99_ms = 50;
  NetworkConfig network;
  // The paths disaggregated pairs can take on this cluster, cheapest first, with the
  // endpoints the cluster gives an instance (NICs, alignment). Empty: every tier path with
  // one aligned NIC per GPU.
  std::vector<PathKind> paths;
  Endpoint prefill_end, decode_end;
  std::string cluster_description;  // for the report
};

struct OptionEstimate {
  std::string name;                                 // "co-located", or "disaggregated over <path>"
  PathKind path = PathKind::kSameNodeRdma;          // disaggregated only
  int prefill_instances = 0, decode_instances = 0;  // co-located: both = instances
  double kv_transfer_ms_mean = 0, kv_transfer_ms_p99 = 0;
  double kv_share_of_ttft = 0;  // p99 transfer / p99 TTFT
  double ttft_p99_ms = 0, tpot_p99_ms = 0, tpot_mean_ms = 0;
  double prefill_utilisation = 0, decode_batch = 0;
  bool stable = true;  // every queue below utilisation 1
  bool meets_slo = false;
  double max_rate_rps = 0;  // the highest rate at which it still meets both SLOs (bisection;
                            // disaggregated: P:D re-chosen at each rate)
};

struct Advice {
  double kv_bytes_per_token = 0;
  std::vector<OptionEstimate> options;  // co-located first, then each path
  std::string verdict;                  // one line: what to do
  std::vector<std::string> reasons;     // why, with the numbers used
  std::vector<std::string> uncertain;   // where the estimate is weakest
};

Result<Advice> Advise(const AdviseInput& input);
std::string FormatAdviceTable(const AdviseInput& input, const Advice& advice);
std::string FormatAdviceJson(const AdviseInput& input, const Advice& advice);
// Transfer time vs prompt length (log axes), one line per path in input.paths (or every path).
std::string RenderTransferSvg(const AdviseInput& input);

}  // namespace toposched::pd
