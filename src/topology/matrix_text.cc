#include "toposched/topology/matrix_text.h"

#include <sstream>

namespace toposched {

namespace {

std::string Cell(const Link& link) {
  return link.cls == LinkClass::kSelf ? " X " : link.Token();
}

std::string Count(int n, const char* one, const char* many) {
  return std::to_string(n) + " " + (n == 1 ? one : many);
}

std::string Summary(const NodeTopology& t) {
  const int gpus = static_cast<int>(t.gpus.size());
  const int rdma = t.RdmaNicCount();
  const int other = static_cast<int>(t.nics.size()) - rdma;
  return Count(gpus, "GPU", "GPUs") + ", " + Count(rdma, "RDMA NIC", "RDMA NICs") + ", " +
         Count(other, "other NIC", "other NICs") + ", " +
         Count(static_cast<int>(t.numa_nodes.size()), "NUMA node", "NUMA nodes") + ", " +
         Count(t.SwitchCount(), "PCIe switch", "PCIe switches");
}

std::string Origin(const NodeTopology& t) {
  std::string s = std::string(ToString(t.source));
  if (!t.source_detail.empty()) s += " " + t.source_detail;
  if (!t.node_name.empty() && t.node_name != t.source_detail) s += ", node " + t.node_name;
  return s;
}

}  // namespace

std::string NoGpuStatement(const NodeTopology& t) {
  return "No GPUs found (" + Origin(t) + "): " + Summary(t) + ".";
}

std::string RenderTopologyMatrix(const NodeTopology& t) {
  // RDMA NICs come first in t.nics (DeriveLinks' order), so NICk is t.nics[k].
  const int ng = static_cast<int>(t.gpus.size());
  const int nr = t.RdmaNicCount();
  std::ostringstream out;
  out << "# " << Origin(t) << ": " << Summary(t) << "\n";
  out << "\t";
  for (int g = 0; g < ng; ++g) out << "GPU" << g << "\t";
  for (int n = 0; n < nr; ++n) out << "NIC" << n << "\t";
  out << "CPU Affinity\tNUMA Affinity\n";
  bool has_xgmi = false;
  for (int a = 0; a < ng; ++a) {
    out << "GPU" << a << "\t";
    for (int b = 0; b < ng; ++b) {
      const Link& link = t.gpu_gpu.at(a, b);
      has_xgmi = has_xgmi || link.fabric == Fabric::kXgmi;
      out << Cell(link) << "\t";
    }
    for (int n = 0; n < nr; ++n) out << Cell(t.gpu_nic.at(a, n)) << "\t";
    const Gpu& g = t.gpus[static_cast<std::size_t>(a)];
    out << (g.cpus.empty() ? "N/A" : g.cpus) << "\t\t" << (g.numa >= 0 ? std::to_string(g.numa) : "N/A")
        << "\n";
  }
  for (int n = 0; n < nr; ++n) {
    out << "NIC" << n << "\t";
    for (int g = 0; g < ng; ++g) out << Cell(t.gpu_nic.at(g, n)) << "\t";
    for (int m = 0; m < nr; ++m) out << Cell(t.nic_nic.at(n, m)) << "\t";
    out << "\n";
  }
  out << "\nLegend:\n\n"
      << "  X    = Self\n"
      << "  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes (e.g., "
         "QPI/UPI)\n"
      << "  NODE = Connection traversing PCIe as well as the interconnect between PCIe Host Bridges within a "
         "NUMA node\n"
      << "  PHB  = Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)\n"
      << "  PXB  = Connection traversing multiple PCIe bridges (without traversing the PCIe Host Bridge)\n"
      << "  PIX  = Connection traversing at most a single PCIe bridge\n"
      << "  NV#  = Connection traversing a bonded set of # NVLinks\n";
  if (has_xgmi) out << "  XGMI = Connection traversing AMD xGMI (Infinity Fabric) links\n";
  if (nr > 0) {
    out << "\nNIC Legend:\n\n";
    for (int n = 0; n < nr; ++n)
      out << "  NIC" << n << ": " << t.nics[static_cast<std::size_t>(n)].DisplayName() << "\n";
  }
  return out.str();
}

}  // namespace toposched
