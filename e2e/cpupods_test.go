package e2e

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestKubeSchedulerCpuPods: a pod that asks no device, scored through the chart's second
// `extenders` entry (prioritize-cpu, kubeScheduler.scoreCpuPods) by the real kube-scheduler.
// Two nodes of one hardware (AWS p4d, 8 GPUs): gpu-full has all its GPUs taken by an 8-GPU pod
// that asks 32 cores, gpu-free has none taken. The typical pods (the extender's window) ask one
// GPU with 64 cores, or eight with 32. An 80-core pod without GPUs leaves 48 cores on gpu-free,
// too few for the 64-core shape: its eight GPUs would be stranded for it. On gpu-full it strands
// nothing (no GPU is free there). Two 8-core pods after it strand nothing anywhere, and still go
// to gpu-full: its GPUs are all taken, gpu-free's are all idle (CpuPodScore). kube-scheduler's
// own scores do not tell the two nodes apart (the chart's NodeResourcesFit scores GPUs only,
// which these pods do not ask, and BalancedAllocation is off), so without the second entry each
// pod lands on either at random (with kubeScheduler.scoreCpuPods=false the test fails 7 times in
// 8).
func TestKubeSchedulerCpuPods(t *testing.T) {
	c := newCluster(t, "TestKubeSchedulerCpuPods")
	ctx := context.Background()
	// system-0 (no NodeTopology, no GPUs) has no such label: the pods below choose between the
	// GPU nodes only.
	gpuNodes := map[string]string{"toposched.io/leaf": "leaf-1", "toposched.io/spine": "spine-1"}
	c.addNodes([]*gpuNode{
		{Name: "gpu-full", File: "aws__p4d.24xlarge_8xA100_4xEFA.nccl.xml", Labels: gpuNodes},
		{Name: "gpu-free", File: "aws__p4d.24xlarge_8xA100_4xEFA.nccl.xml", Labels: gpuNodes},
	})
	r, schedulerName := c.startLeaderAndScheduler("-e2e-cpu")

	create := func(name, node string, gpus int, cores string) {
		pod := c.podObject(schedulerName, podSpec{name: name, gpus: gpus, node: node})
		if node == "" {
			pod.Spec.NodeSelector = map[string]string{"toposched.io/leaf": "leaf-1"}
		}
		res := &pod.Spec.Containers[0].Resources
		res.Requests = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cores)}
		if gpus == 0 {
			res.Limits = nil
		}
		if _, err := c.cp.Admin.CoreV1().Pods(workloadNS).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create pod %s: %v", name, err)
		}
		c.waitBound([]podSpec{{name: name, fits: true}}, 2*time.Minute)
	}
	// The typical pods: the extender learns them from the GPU pods it is asked about. The
	// one-GPU pod leaves again (the window keeps its shape).
	create("one-gpu", "gpu-free", 1, "64")
	c.deletePod("one-gpu")
	create("whole", "gpu-full", 8, "32")

	create("cpu-only", "", 0, "80")
	if n := c.nodeOf("cpu-only"); n != "gpu-full" {
		t.Errorf("cpu-only on %s, want gpu-full: on gpu-free its 80 cores would strand 8 GPUs for the 64-core pods\n"+
			"--- extender log tail:\n%s", n, r.proc.Tail(3000))
	}
	for _, name := range []string{"small-1", "small-2"} {
		create(name, "", 0, "8")
		if n := c.nodeOf(name); n != "gpu-full" {
			t.Errorf("%s on %s, want gpu-full: every GPU there is taken, none on gpu-free", name, n)
		}
	}
	answered := c.proxy.Answered()["/scheduler/prioritize-cpu"]
	if answered[200] == 0 {
		t.Errorf("prioritize-cpu never answered 200 (answers %v)", answered)
	}
}
