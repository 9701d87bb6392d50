package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"toposched.io/e2e/harness"
)

// TestVolcanoReclaim: two queues of equal weight, the chart's `volcano.actions` with `reclaim`
// added (as an operator who shares GPUs between teams sets it). Queue team-a fills Lassen's 4
// GPUs; a pod of queue team-b then reclaims its share: Volcano evicts a team-a pod and pipelines
// the team-b pod onto its devices, and toposched gives them to it only once the victim is going;
// the team-a pods that stay keep their devices.
func TestVolcanoReclaim(t *testing.T) {
	c, v := newVolcanoCluster(t, "TestVolcanoReclaim", "--set", "volcano.actions=enqueue\\, allocate\\, preempt\\, reclaim\\, backfill")
	c.addNodes([]*gpuNode{{Name: "gpu-lassen", File: "llnl__lassen_ibm-ac922_power9_4xV100_4xmlx5.hwloc2.xml"}})
	c.startAgents()
	leader := v.startToposched()
	c.cp.EnsureNamespace(t, workloadNS)
	for _, q := range []string{"team-a", "team-b"} {
		v.queue(q, 1)
	}
	v.start()
	if _, conf := v.schedulerConf(); !containsAction(conf, "reclaim") {
		t.Fatalf("the chart's volcano.actions did not reach Volcano's configuration:\n%s", conf)
	}

	var teamA []podSpec
	for i := 0; i < 4; i++ {
		p := podSpec{name: fmt.Sprintf("team-a-%d", i), gpus: 1, fits: true}
		v.podGroup("pg-"+p.name, 1, "team-a")
		v.createGroupPod(p, "pg-"+p.name)
		teamA = append(teamA, p)
	}
	v.waitBound(teamA, 2*time.Minute)
	before := c.allocations(podNames(teamA))

	b := podSpec{name: "team-b-0", gpus: 1, fits: true}
	v.podGroup("pg-"+b.name, 1, "team-b")
	v.createGroupPod(b, "pg-"+b.name)
	var victim string
	var evictedAt time.Time
	err := harness.Eventually(3*time.Minute, 100*time.Millisecond, func() (bool, error) {
		for _, p := range teamA {
			pod, err := c.cp.Admin.CoreV1().Pods(workloadNS).Get(context.Background(), p.name, metav1.GetOptions{})
			if evictedAt.IsZero() && (isNotFound(err) || (err == nil && pod.DeletionTimestamp != nil)) {
				victim, evictedAt = p.name, time.Now()
			}
		}
		return c.nodeOf(b.name) != "", fmt.Errorf("team-b-0 not bound (a team-a pod evicted: %v)", victim != "")
	})
	if err != nil {
		t.Fatalf("%v\n--- vc-scheduler log tail:\n%s", err, v.sched.Tail(6000))
	}
	t.Logf("team-b-0 reclaimed %s's GPU", victim)
	for _, e := range c.proxy.VolcanoEvents() {
		if e.Pod == workloadNS+"/"+b.name && e.Allocate && e.Error == "" {
			if e.At.Before(evictedAt.Add(-time.Second)) {
				t.Errorf("team-b-0 was allocated at %s, before the eviction was seen (%s)", e.At.Format(time.RFC3339Nano), evictedAt.Format(time.RFC3339Nano))
			}
			break
		}
	}
	all := []podSpec{b}
	for _, p := range teamA {
		if p.name == victim {
			p.victim = true
			if err := harness.Eventually(time.Minute, 250*time.Millisecond, func() (bool, error) {
				return c.podUID(p.name) == "", fmt.Errorf("%s still there", p.name)
			}); err != nil {
				t.Fatal(err)
			}
			c.deleteOwnedPodGroupsNamed("pg-" + p.name)
		}
		all = append(all, p)
	}
	delete(before, victim)
	c.assertUnchanged(before)
	c.assertPlacements(all)
	c.assertReplicaState(leader)
}

// queue creates a Volcano Queue (scheduling.volcano.sh/v1beta1) with weight, reclaimable.
func (v *volcano) queue(name string, weight int) {
	obj := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue",
		"metadata": map[string]any{"name": name},
		"spec":     map[string]any{"weight": int64(weight), "reclaimable": true},
	}}
	if _, err := v.c.dyn.Client.Resource(queueGVR).Create(context.Background(), obj, metav1.CreateOptions{}); err != nil {
		v.c.t.Fatalf("create Queue %s: %v", name, err)
	}
}

// deleteOwnedPodGroupsNamed deletes the workload PodGroup name (the test made it, for a pod that
// is gone; as the garbage collector would for an owned one).
func (c *cluster) deleteOwnedPodGroupsNamed(name string) {
	err := c.dyn.Client.Resource(podGroupGVR).Namespace(workloadNS).Delete(context.Background(), name, metav1.DeleteOptions{})
	if err != nil && !isNotFound(err) {
		c.t.Fatalf("delete PodGroup %s: %v", name, err)
	}
}

func containsAction(conf, action string) bool {
	var cfg struct {
		Actions string `json:"actions"`
	}
	if err := yaml.Unmarshal([]byte(conf), &cfg); err != nil {
		return false
	}
	for _, a := range strings.Split(cfg.Actions, ",") {
		if strings.TrimSpace(a) == action {
			return true
		}
	}
	return false
}
