package e2e

import (
	"context"
	"fmt"
	"hash/fnv"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestKubeSchedulerOneNodeOfTheBest: where the extender scores several nodes alike, the real
// kube-scheduler would draw one at random (schedule_one.go selectHost) and so spread equal pods
// over them. The extender gives the top score to one of them, the first in a stable order of
// node names (FNV-1a of the name, extender::PreferOneOfTheBest), and one step less to the others.
// Three groups of three identical, empty nodes (AWS p4d, 8 GPUs); one 1-GPU pod per group, held
// to its group by a node selector: each must land on its group's first node. Drawn at random,
// all three would do so one time in 27.
func TestKubeSchedulerOneNodeOfTheBest(t *testing.T) {
	c := newCluster(t, "TestKubeSchedulerOneNodeOfTheBest")
	ctx := context.Background()
	groups := []string{"g1", "g2", "g3"}
	var nodes []*gpuNode
	first := map[string]string{}
	for _, g := range groups {
		var best uint64
		for _, s := range []string{"a", "b", "c"} {
			name := fmt.Sprintf("tie-%s-%s", g, s)
			nodes = append(nodes, &gpuNode{Name: name, File: "aws__p4d.24xlarge_8xA100_4xEFA.nccl.xml", Labels: map[string]string{
				"toposched.io/leaf": "leaf-1", "toposched.io/spine": "spine-1", "e2e.toposched.io/group": g}})
			h := fnv.New64a()
			h.Write([]byte(name))
			if k := h.Sum64(); first[g] == "" || k < best {
				first[g], best = name, k
			}
		}
	}
	c.addNodes(nodes)
	r, schedulerName := c.startLeaderAndScheduler("-e2e-ties")

	for _, g := range groups {
		name := "one-gpu-" + g
		pod := c.podObject(schedulerName, podSpec{name: name, gpus: 1})
		pod.Spec.NodeSelector = map[string]string{"e2e.toposched.io/group": g}
		if _, err := c.cp.Admin.CoreV1().Pods(workloadNS).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create pod %s: %v", name, err)
		}
		c.waitBound([]podSpec{{name: name, fits: true}}, 2*time.Minute)
		if n := c.nodeOf(name); n != first[g] {
			t.Errorf("%s on %s, want %s: the first of its group's equal nodes in the stable order\n--- extender log tail:\n%s",
				name, n, first[g], r.proc.Tail(2000))
		}
	}
	if answered := c.proxy.Answered()["/scheduler/prioritize"]; answered[200] == 0 {
		t.Errorf("prioritize never answered 200 (answers %v)", answered)
	}
}
