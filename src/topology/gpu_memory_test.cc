// Card memory estimates: sizes named in models, PCI ids of data-center cards, the usable-size
// rule, and filling only cards without a figure.

#include "toposched/topology/gpu_memory.h"

#include <gtest/gtest.h>

namespace toposched {
namespace {

TEST(GpuMemory, TheModelsNameWinsOverItsPciId) {
  EXPECT_EQ(NominalGpuMemoryGib(0x10de, 0x1db8, "Tesla V100-SXM3-32GB-H"), 32u);
  EXPECT_EQ(NominalGpuMemoryGib(0x10de, 0x15f8, "Tesla P100-PCIE-16GB"), 16u);
  EXPECT_EQ(NominalGpuMemoryGib(0x1002, 0x66a1, "deon Instinct MI50 32GB"), 32u);
  EXPECT_EQ(NominalGpuMemoryGib(0x10de, 0x20b2, "NVIDIA A100 80 GB"), 80u);
  // A size in the name beats the id's (a renamed or mis-keyed card is taken at its word).
  EXPECT_EQ(NominalGpuMemoryGib(0x10de, 0x20b0, "A100-SXM4-80GB"), 80u);
}

TEST(GpuMemory, DataCenterPciIdsWithoutASizeInTheName) {
  EXPECT_EQ(NominalGpuMemoryGib(0x10de, 0x2330, ""), 80u);  // H100 SXM5 80GB (NCCL files carry no model)
  EXPECT_EQ(NominalGpuMemoryGib(0x10de, 0x20b0, ""), 40u);  // A100 SXM4 40GB (aws p4d)
  EXPECT_EQ(NominalGpuMemoryGib(0x10de, 0x20b2, ""), 80u);  // A100 SXM4 80GB (aws p4de)
  EXPECT_EQ(NominalGpuMemoryGib(0x10de, 0x1eb8, "Tesla T4"), 16u);
  EXPECT_EQ(NominalGpuMemoryGib(0x1002, 0x740c, ""), 64u);  // one MI250(X) GCD
  // Unknown ids and names without a size: unknown.
  EXPECT_EQ(NominalGpuMemoryGib(0x10de, 0x1b81, "GeForce GTX 1070"), 0u);
  EXPECT_EQ(NominalGpuMemoryGib(0x10de, 0x2331, ""), 0u);  // H100 PCIe: 80 or 94 GB under one id? not listed
  EXPECT_EQ(NominalGpuMemoryGib(0x1002, 0x74a0, "Aqua Vanjaram [Instinct MI300A]"), 0u);
  // "GB" that is not a size.
  EXPECT_EQ(NominalGpuMemoryGib(0, 0, "Link 25GBps"), 0u);
  EXPECT_EQ(NominalGpuMemoryGib(0, 0, "GB"), 0u);
  EXPECT_EQ(NominalGpuMemoryGib(0, 0, "card 123456GB"), 0u);
}

TEST(GpuMemory, TheUsableEstimateStaysBelowWhatTheCardsReport) {
  EXPECT_EQ(EstimatedUsableMib(0), 0u);
  EXPECT_EQ(EstimatedUsableMib(16), 15296u);
  // What NVML/hwloc report for these cards (the shared exports and the synthetic presets' figures).
  EXPECT_LE(EstimatedUsableMib(16), 15360u);  // T4, ECC on: 1/16 reserved
  EXPECT_LE(EstimatedUsableMib(16), 16128u);  // V100 SXM2 16GB (llnl lassen)
  EXPECT_LE(EstimatedUsableMib(80), 81559u);  // H100 SXM5 80GB
  EXPECT_LE(EstimatedUsableMib(48), 46068u);  // L40S, ECC on
  EXPECT_LE(EstimatedUsableMib(24), 23028u);  // A10G, ECC on
  EXPECT_LE(EstimatedUsableMib(64), 65520u);  // MI250X GCD (llnl tioga)
}

TEST(GpuMemory, FillsOnlyCardsWithoutAFigure) {
  NodeTopology t;
  t.gpus.resize(3);
  t.gpus[0].vendor_id = 0x10de;
  t.gpus[0].device_id = 0x2330;
  t.gpus[1].vendor_id = 0x10de;
  t.gpus[1].device_id = 0x2330;
  t.gpus[1].memory_mib = 81559;  // measured: kept
  t.gpus[2].vendor_id = 0x10de;
  t.gpus[2].device_id = 0x1b81;  // unknown: stays 0
  EXPECT_EQ(FillKnownGpuMemory(t), 1);
  EXPECT_EQ(t.gpus[0].memory_mib, EstimatedUsableMib(80));
  EXPECT_EQ(t.gpus[1].memory_mib, 81559u);
  EXPECT_EQ(t.gpus[2].memory_mib, 0u);
}

}  // namespace
}  // namespace toposched
