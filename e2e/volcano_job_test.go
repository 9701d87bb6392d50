package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"toposched.io/e2e/harness"
)

// TestVolcanoJob: Volcano Jobs (batch.volcano.sh/v1alpha1), as Volcano's users submit
// training and Prefill/Decode serving. First one Prefill task and two Decode replicas of one
// pool, minAvailable 3: vc-controller-manager's job controller makes the PodGroup, vc-scheduler
// enqueues and allocates it through toposched (predicate, prioritize, allocate), and the three
// pods land, each with its allocation written by toposched's allocate before Volcano's Binding
// and consistent with the store. Their pods then finish (kwok completes pods owned by a Job),
// and a second Job of all 16 GPUs lands whole on the devices they freed.
//
// Without Volcano's admission webhooks (turned off through the chart, e2e/README.md) nothing
// fills a Job's defaults, so the Job names its scheduler, queue, minAvailable and maxRetry as
// the webhook would have.
func TestVolcanoJob(t *testing.T) {
	c, v := newVolcanoCluster(t, "TestVolcanoJob")
	c.addNodes([]*gpuNode{
		{Name: "gpu-azure-a", File: "azure__nd-a100-v4_8xA100_8xCX6.nccl.xml", Labels: map[string]string{"toposched.io/leaf": "leaf-1", "toposched.io/spine": "spine-1"}},
		{Name: "gpu-azure-b", File: "azure__nd-a100-v4_8xA100_8xCX6.nccl.xml", Labels: map[string]string{"toposched.io/leaf": "leaf-1", "toposched.io/spine": "spine-1"}},
	})
	c.startAgents()
	v.startToposched()
	c.cp.EnsureNamespace(t, workloadNS)
	v.start()

	pd := func(role string) map[string]string {
		return map[string]string{"llm-d.ai/role": role, "toposched.io/pool": "pd-job"}
	}
	first := []vcTask{
		{name: "prefill", replicas: 1, spec: podSpec{gpus: 4, rdmaRes: 4, labels: pd("prefill")}},
		{name: "decode", replicas: 2, spec: podSpec{gpus: 2, rdmaRes: 2, labels: pd("decode")}},
	}
	firstPods := v.createJob("pd-job", first)
	v.waitBound(firstPods, 2*time.Minute)
	c.assertPlacements(firstPods)
	for _, p := range firstPods {
		if n := c.nodeOf(p.name); n == "" {
			t.Errorf("%s not bound", p.name)
		}
	}

	// kwok completes the pods of a Job (its pod-complete stage selects pods owned by a Job), as
	// a finished training run's pods end: toposched frees their devices, and a Job of all 16
	// GPUs, which could not have landed beside the first, lands whole on them.
	if err := harness.Eventually(90*time.Second, 250*time.Millisecond, func() (bool, error) {
		for _, p := range firstPods {
			pod, err := c.cp.Admin.CoreV1().Pods(workloadNS).Get(context.Background(), p.name, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			if pod.Status.Phase != corev1.PodSucceeded {
				return false, fmt.Errorf("%s is %s", p.name, pod.Status.Phase)
			}
		}
		return true, nil
	}); err != nil {
		t.Fatalf("the first Job's pods did not finish: %v", err)
	}
	secondPods := v.createJob("big-job", []vcTask{{name: "train", replicas: 2, spec: podSpec{gpus: 8, rdmaRes: 8}}})
	v.waitBound(secondPods, 2*time.Minute)
	c.assertPlacements(secondPods)
	if a, b := c.nodeOf(secondPods[0].name), c.nodeOf(secondPods[1].name); a == b {
		t.Errorf("both 8-GPU pods on %s", a)
	}
}

// vcTask is one task of a Volcano Job: `replicas` pods like `spec` (its name is the task's).
type vcTask struct {
	name     string
	replicas int
	spec     podSpec
}

// createJob submits a Volcano Job of the tasks (submitJob) and waits for the pods the job
// controller makes (named <job>-<task>-<index>), which it returns.
func (v *volcano) createJob(name string, tasks []vcTask) []podSpec {
	v.submitJob(name, tasks)
	var pods []podSpec
	for _, task := range tasks {
		for i := 0; i < task.replicas; i++ {
			p := task.spec
			p.name = fmt.Sprintf("%s-%s-%d", name, task.name, i)
			p.fits = true
			pods = append(pods, p)
		}
	}
	v.waitPodsExist(pods, name)
	return pods
}

// submitJob creates a Volcano Job of the tasks with minAvailable = all their pods.
func (v *volcano) submitJob(name string, tasks []vcTask) {
	c, t := v.c, v.c.t
	var specs []any
	total := 0
	for _, task := range tasks {
		tmpl := c.podObject(v.schedulerName, task.spec)
		tmplSpec, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&tmpl.Spec)
		if err != nil {
			t.Fatal(err)
		}
		labels := map[string]any{}
		for k, val := range task.spec.labels {
			labels[k] = val
		}
		specs = append(specs, map[string]any{
			"name":     task.name,
			"replicas": int64(task.replicas),
			"template": map[string]any{"metadata": map[string]any{"labels": labels}, "spec": tmplSpec},
		})
		total += task.replicas
	}
	job := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job",
		"metadata": map[string]any{"name": name, "namespace": workloadNS},
		"spec": map[string]any{
			"schedulerName": v.schedulerName,
			"queue":         "default",
			"minAvailable":  int64(total),
			"maxRetry":      int64(3),
			"tasks":         specs,
		},
	}}
	if _, err := c.dyn.Client.Resource(vcJobGVR).Namespace(workloadNS).Create(context.Background(), job, metav1.CreateOptions{}); err != nil {
		b, _ := json.Marshal(job.Object)
		t.Fatalf("create Volcano Job %s: %v\n%s", name, err, b)
	}
}

// waitPodsExist waits until the job controller made the Job's pods (once vc-scheduler enqueued
// its PodGroup).
func (v *volcano) waitPodsExist(pods []podSpec, job string) {
	c, t := v.c, v.c.t
	if err := harness.Eventually(90*time.Second, 250*time.Millisecond, func() (bool, error) {
		for _, p := range pods {
			if _, err := c.cp.Admin.CoreV1().Pods(workloadNS).Get(context.Background(), p.name, metav1.GetOptions{}); err != nil {
				return false, fmt.Errorf("pod %s: %v", p.name, err)
			}
		}
		return true, nil
	}); err != nil {
		t.Fatalf("Volcano Job %s: %v\n--- vc-controller-manager log tail (%s):\n%s", job, err, v.ctrl.LogPath, v.ctrl.Tail(6000))
	}
}
