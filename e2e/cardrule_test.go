package e2e

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestKubeSchedulerVgpuCardForTheTypicalPods: which card a vGPU takes (docs/placement.md, "Which
// card a vGPU takes") through the real kube-scheduler, the chart and the extender's bind. Once
// the extender's window holds `capacity.minTypicalPods` pods asking a device (3 here, set
// through the chart's values; 50 by default) and neither they nor the pod ask an RDMA NIC, a
// single vGPU of a pod that names no hami.io/gpu-scheduler-policy takes the card that strands
// least for the typical pods, not HAMi's spread.
//
// One NVIDIA DGX-2H (16 V100 32 GB, registered by HAMi's device plugin as in TestKubeScheduler),
// four vGPUs in turn, each bound before the next is created:
//   - a (50 % of a card) and b (30 %) come while the window holds fewer than 3 pods: HAMi's
//     spread puts them on two cards;
//   - c (50 %), the third, fills a's card: that strands nothing, as a free card would not
//     either, and among cards that strand alike the fuller wins; on b's card it would leave
//     20 % that no typical pod can use. HAMi's spread would take an emptier card;
//   - d (30 %): on b's card it would leave 40 %, too little for the typical 50 % pods; on a free
//     card nothing is stranded. So d takes a free card, where binpack would take b's.
//
// With the chart's default (500, and 50 since 2026-12-05) c did not go to a's card (checked by
// running this test without the --set): the blind spread decided every card.
func TestKubeSchedulerVgpuCardForTheTypicalPods(t *testing.T) {
	c := newCluster(t, "TestKubeSchedulerVgpuCardForTheTypicalPods", "--set", "config.capacity.minTypicalPods=3")
	dgx := &gpuNode{Name: "gpu-dgx2h", File: "hwloc__nvidia-dgx2h_16xV100_12xNVSwitch.hwloc2.xml",
		Labels: map[string]string{"toposched.io/leaf": "leaf-1", "toposched.io/spine": "spine-1"}}
	c.addNodes([]*gpuNode{dgx})
	registered := c.registerHAMi(dgx, 32768, "Tesla V100-SXM3-32GB-H")
	hami := startHAMiPlugin(c, dgx.Name)
	defer hami.Stop()
	r, schedulerName := c.startLeaderAndScheduler("-e2e-cards")

	share := func(name string, percent int) podSpec {
		return podSpec{name: name, gpus: 1, gpucores: percent, gpumem: 32768 * percent / 100, node: dgx.Name, fits: true}
	}
	specs := []podSpec{share("vgpu-a", 50), share("vgpu-b", 30), share("vgpu-c", 50), share("vgpu-d", 30)}
	card := c.bindVgpusInTurn(t, schedulerName, specs, false)
	tail := func() string { return "\n--- extender log tail:\n" + r.proc.Tail(2000) }
	if card["vgpu-b"] == card["vgpu-a"] {
		t.Errorf("vgpu-b shares vgpu-a's card %s: before the window holds 3 pods HAMi's spread keeps them apart", card["vgpu-a"])
	}
	if card["vgpu-c"] != card["vgpu-a"] {
		t.Errorf("vgpu-c on %s, not vgpu-a's card %s, which it fills and so strands nothing (the fuller of the cards that strand nothing)%s",
			card["vgpu-c"], card["vgpu-a"], tail())
	}
	if card["vgpu-d"] == card["vgpu-a"] || card["vgpu-d"] == card["vgpu-b"] {
		t.Errorf("vgpu-d on %s, a card vgpu-a (%s) or vgpu-b (%s) holds: on b's it strands 40 %% for the typical 50 %% pods, a free card nothing%s",
			card["vgpu-d"], card["vgpu-a"], card["vgpu-b"], tail())
	}
	// What the bind wrote is what HAMi reads.
	c.assertHAMi(t, specs, registered, hami)
}

// bindVgpusInTurn creates each pod of `specs` (one vGPU each) and waits for its bind before the
// next, and returns the card each took: its UUID, after its node's name and a slash with
// `withNode` (toposched.io/allocation).
func (c *cluster) bindVgpusInTurn(t *testing.T, schedulerName string, specs []podSpec, withNode bool) map[string]string {
	t.Helper()
	card := map[string]string{}
	for _, p := range specs {
		c.createPod(schedulerName, p)
		c.waitBound([]podSpec{p}, 2*time.Minute)
		pod, err := c.cp.Admin.CoreV1().Pods(workloadNS).Get(context.Background(), p.name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var al allocation
		if err := json.Unmarshal([]byte(pod.Annotations["toposched.io/allocation"]), &al); err != nil || len(al.GPUs) != 1 {
			t.Fatalf("%s: allocation %q: %v", p.name, pod.Annotations["toposched.io/allocation"], err)
		}
		card[p.name] = al.GPUs[0].UUID
		if withNode {
			card[p.name] = pod.Spec.NodeName + "/" + al.GPUs[0].UUID
		}
		t.Logf("%s (%d %%): %s GPU%d %s", p.name, p.gpucores, pod.Spec.NodeName, al.GPUs[0].Index, al.GPUs[0].UUID)
	}
	return card
}
