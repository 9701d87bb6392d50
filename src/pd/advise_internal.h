#pragma once
// What the advice (advise.cc) and its reports (advise_format.cc) share; private to toposched::pd.

#include <string>
#include <utility>
#include <vector>

#include "toposched/pd/advise.h"

namespace toposched::pd::advise_internal {

// Number formats of the reasons and reports: printf's `format` of v; seconds as ms; a share as
// a percentage; a request rate; an option's Prefill:Decode instance ratio "P:D".
std::string Fmt(const char* format, double v);
std::string Ms(double seconds);
std::string Pct(double f);
std::string Rps(double r);
std::string Ratio(const OptionEstimate& o);

// The KV transfer paths the input asks about (its own, else the same node and each network
// tier's), and the Prefill and Decode endpoints they connect.
std::vector<PathKind> PathsOf(const AdviseInput& in);
std::pair<Endpoint, Endpoint> EndpointsOf(const AdviseInput& in);

}  // namespace toposched::pd::advise_internal
