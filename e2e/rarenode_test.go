package e2e

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestKubeSchedulerRareNodeClass: a rare node class last (docs/placement.md) through the real
// kube-scheduler and the chart's configuration. gpu-rare (Azure ND A100 v4: 8 GPUs, 8 RDMA NICs)
// is the only node that can run an 8-GPU, 8-NIC pod; gpu-common (AWS p4d: 8 GPUs, 4 EFA) cannot.
// While "big" holds part of gpu-rare, a 1-GPU, 1-NIC pod would pack there (FGD's measure sees
// nothing more to lose; measured with `toposched simulate` on the same two exports, the rule
// off), and the next whole-node pod would wait. With the rule the extender scores gpu-rare 0
// for it, kube-scheduler binds it to gpu-common, and once "big" leaves the whole-node pod runs.
func TestKubeSchedulerRareNodeClass(t *testing.T) {
	c := newCluster(t, "TestKubeSchedulerRareNodeClass")
	ctx := context.Background()
	leaf := map[string]string{"toposched.io/leaf": "leaf-1", "toposched.io/spine": "spine-1"}
	c.addNodes([]*gpuNode{
		{Name: "gpu-rare", File: "azure__nd-a100-v4_8xA100_8xCX6.nccl.xml", Labels: leaf},
		{Name: "gpu-common", File: "aws__p4d.24xlarge_8xA100_4xEFA.nccl.xml", Labels: leaf},
	})
	r, schedulerName := c.startLeaderAndScheduler("-e2e-rare")

	// The extender learns the typical pods from the pods it is asked about: a whole-node pod
	// runs first (only gpu-rare fits it) and leaves.
	whole0 := podSpec{name: "whole-0", gpus: 8, rdmaRes: 8, fits: true}
	c.createPod(schedulerName, whole0)
	c.waitBound([]podSpec{whole0}, 2*time.Minute)
	if n := c.nodeOf(whole0.name); n != "gpu-rare" {
		t.Fatalf("%s on %s, want gpu-rare (the only node with 8 RDMA NICs)", whole0.name, n)
	}
	c.deletePod(whole0.name)

	// kube-scheduler's own scores prefer gpu-rare for the next pod: the chart's MostAllocated
	// over GPUs (gpu-rare holds five of them), and BalancedAllocation once a CPU-heavy pod
	// without GPUs runs on gpu-common. So where the small pod lands is the extender's doing
	// (without the rule both nodes get 10 and kube-scheduler picks gpu-rare; checked with
	// capacity.rareClassLast=false, before the chart's MostAllocated).
	filler := c.podObject(schedulerName, podSpec{name: "cpu-filler", node: "gpu-common"})
	filler.Spec.Containers[0].Resources = corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100")},
	}
	if _, err := c.cp.Admin.CoreV1().Pods(workloadNS).Create(ctx, filler, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create pod cpu-filler: %v", err)
	}
	c.waitBound([]podSpec{{name: "cpu-filler", fits: true}}, 2*time.Minute)

	big := podSpec{name: "big", gpus: 5, rdmaRes: 5, fits: true}
	c.createPod(schedulerName, big)
	c.waitBound([]podSpec{big}, 2*time.Minute)
	if n := c.nodeOf(big.name); n != "gpu-rare" {
		t.Fatalf("%s on %s, want gpu-rare (the only node with 5 RDMA NICs)", big.name, n)
	}
	small := podSpec{name: "small", gpus: 1, rdmaRes: 1, fits: true}
	c.createPod(schedulerName, small)
	c.waitBound([]podSpec{small}, 2*time.Minute)
	if n := c.nodeOf(small.name); n != "gpu-common" {
		t.Errorf("%s on %s, want gpu-common: gpu-rare is kept for the 8-GPU, 8-NIC pods\n--- extender log tail:\n%s",
			small.name, n, r.proc.Tail(3000))
	}

	c.deletePod(big.name)
	whole1 := podSpec{name: "whole-1", gpus: 8, rdmaRes: 8, fits: true}
	c.createPod(schedulerName, whole1)
	c.waitBound([]podSpec{whole1}, 2*time.Minute)
	if n := c.nodeOf(whole1.name); n != "gpu-rare" {
		t.Errorf("%s on %s, want gpu-rare", whole1.name, n)
	}
}
