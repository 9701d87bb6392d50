package e2e

import (
	"hash/fnv"
	"sort"
	"testing"
)

// TestKubeSchedulerVgpuNodeEvensOutTheRemnants: evening out the remnants (docs/placement.md,
// "Evening out the remnants") through the real kube-scheduler, the chart and the extender's
// reply. Among the nodes that score alike for a single vGPU, the one whose card leaves a
// remnant the cluster already has many of ranks first, ahead of the stable order of node names
// (FNV-1a, TestKubeSchedulerOneNodeOfTheBest).
//
// Three NVIDIA DGX-2H (16 V100 32 GB each, registered by HAMi's device plugin), the chart with
// `--set config.capacity.minTypicalPods=3`. Three vGPUs held to one node each leave one card
// with 35 % free on the first node in the stable order ("a") and 30 % on the other two:
// a 65 % share on a, 70 % shares on b and c. Then, without a node selector:
//   - a 20 % share: each node's partly used card is the one that strands least for the typical
//     pods (65 %, 70 % and 20 % shares), and the three score alike (53). The stable order alone
//     would take a, leaving 15 %; the rule takes the first of b and c in that order (a 30 %
//     remnant, which two cards share), leaving a's 35 % whole;
//   - a 35 % share: it fills a's card exactly, where after the stable order's choice it would
//     take a fresh card.
func TestKubeSchedulerVgpuNodeEvensOutTheRemnants(t *testing.T) {
	c := newCluster(t, "TestKubeSchedulerVgpuNodeEvensOutTheRemnants", "--set", "config.capacity.minTypicalPods=3")
	names := []string{"rem-1", "rem-2", "rem-3"}
	key := func(name string) uint64 {
		h := fnv.New64a()
		h.Write([]byte(name))
		return h.Sum64()
	}
	sort.Slice(names, func(i, j int) bool { return key(names[i]) < key(names[j]) })
	a, b := names[0], names[1] // the stable order's first node, and the first of the other two
	var nodes []*gpuNode
	for _, n := range names {
		nodes = append(nodes, &gpuNode{Name: n, File: "hwloc__nvidia-dgx2h_16xV100_12xNVSwitch.hwloc2.xml",
			Labels: map[string]string{"toposched.io/leaf": "leaf-1", "toposched.io/spine": "spine-1"}})
	}
	c.addNodes(nodes)
	registered := map[string]map[string]int32{}
	for _, n := range nodes {
		for node, cards := range c.registerHAMi(n, 32768, "Tesla V100-SXM3-32GB-H") {
			registered[node] = cards
		}
	}
	hami := startHAMiPlugin(c, names...)
	defer hami.Stop()
	r, schedulerName := c.startLeaderAndScheduler("-e2e-remnants")

	share := func(name string, percent int, node string) podSpec {
		return podSpec{name: name, gpus: 1, gpucores: percent, gpumem: 32768 * percent / 100, node: node, fits: true}
	}
	specs := []podSpec{share("vgpu-65", 65, a), share("vgpu-70-b", 70, names[1]), share("vgpu-70-c", 70, names[2]),
		share("vgpu-20", 20, ""), share("vgpu-35", 35, "")}
	card := c.bindVgpusInTurn(t, schedulerName, specs, true)
	tail := func() string { return "\n--- extender log tail:\n" + r.proc.Tail(2000) }
	if n := c.nodeOf("vgpu-20"); n != b {
		t.Errorf("vgpu-20 on %s, want %s: its card leaves a 30 %% remnant two cards share; %s, the first in the stable order, "+
			"holds the only 35 %%%s", n, b, a, tail())
	}
	if card["vgpu-20"] != card["vgpu-70-b"] {
		t.Errorf("vgpu-20 on card %s, want vgpu-70-b's %s (the card that strands least)%s", card["vgpu-20"], card["vgpu-70-b"], tail())
	}
	if card["vgpu-35"] != card["vgpu-65"] {
		t.Errorf("vgpu-35 on card %s, want vgpu-65's %s, which it fills exactly%s", card["vgpu-35"], card["vgpu-65"], tail())
	}
	// What the bind wrote is what HAMi reads.
	c.assertHAMi(t, specs, registered, hami)
}
