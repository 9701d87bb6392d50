package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"toposched.io/e2e/harness"
)

// TestVolcano: the real vc-scheduler v1.13.3 and vc-controller-manager (Volcano's chart, its
// configuration replaced by the file toposched's chart renders, as docs/install.md says) call
// two toposched replicas (volcano mode, leader-elected) over kwok nodes built from real topology
// exports. Single pods, a Prefill/Decode gang that cannot fit and then can, both replicas down,
// the leader killed, and vc-scheduler killed, each mid-run.
func TestVolcano(t *testing.T) {
	c, v := newVolcanoCluster(t, "TestVolcano")
	c.addNodes([]*gpuNode{
		{Name: "gpu-azure-a", File: "azure__nd-a100-v4_8xA100_8xCX6.nccl.xml", Labels: map[string]string{"toposched.io/leaf": "leaf-1", "toposched.io/spine": "spine-1"}},
		// Reserved (tainted) for the gang: only pods that tolerate it land there.
		{Name: "gpu-azure-b", File: "azure__nd-a100-v4_8xA100_8xCX6.nccl.xml", Labels: map[string]string{"toposched.io/leaf": "leaf-1", "toposched.io/spine": "spine-1"},
			Taints: []corev1.Taint{reservedTaint}},
		// Reserved too, for the preemption round.
		{Name: "gpu-lassen", File: "llnl__lassen_ibm-ac922_power9_4xV100_4xmlx5.hwloc2.xml", Labels: map[string]string{"toposched.io/leaf": "leaf-2", "toposched.io/spine": "spine-1"},
			Taints: []corev1.Taint{reservedTaint}},
		{Name: "gpu-oci-h100", File: "oci__bm.gpu.h100.8_kubernetes-variant.nccl.xml", Labels: map[string]string{"toposched.io/leaf": "leaf-2", "toposched.io/spine": "spine-1"}},
		{Name: "gpu-dgx2h", File: "hwloc__nvidia-dgx2h_16xV100_12xNVSwitch.hwloc2.xml", Labels: map[string]string{"toposched.io/leaf": "leaf-3", "toposched.io/spine": "spine-1"}},
	})
	// HAMi's device plugin registers the DGX-2H and serves it (Volcano's allocate takes HAMi's
	// node lock there, the chart's hamiNodeLock auto): the Volcano path's HAMi records are read
	// with HAMi's own code at the end.
	var dgx *gpuNode
	for _, n := range c.nodes {
		if n.Name == "gpu-dgx2h" {
			dgx = n
		}
	}
	registered := c.registerHAMi(dgx, 32768, "Tesla V100-SXM3-32GB-H")
	c.startAgents()
	hami := startHAMiPlugin(c, dgx.Name)
	leader := v.startToposched()
	t.Logf("toposched leader: %s", leader)
	c.cp.EnsureNamespace(t, workloadNS)
	v.start()
	sn := v.schedulerName

	pd := func(pool, role string) map[string]string {
		return map[string]string{"llm-d.ai/role": role, "toposched.io/pool": pool}
	}
	// Single pods: vc-controller-manager gives each a PodGroup of one.
	wave1 := []podSpec{
		{name: "train-rdma4-0", gpus: 4, rdmaRes: 4, fits: true},
		{name: "gpu2-annot-0", gpus: 2, rdmaAnnot: "2", fits: true},
		{name: "gpu1-0", gpus: 1, fits: true},
		{name: "gpu1-1", gpus: 1, fits: true},
		{name: "prefill-0", gpus: 2, rdmaRes: 2, labels: pd("pd-a", "prefill"), fits: true},
		{name: "decode-0", gpus: 1, labels: pd("pd-a", "decode"), fits: true},
		// (No pod larger than the cluster: Volcano would enqueue it and its PodGroup would hold
		// the queue's room for as long as it exists, as Volcano's proportion plugin does.)
		// Fits Volcano's own predicates (GPU nodes have a GPU), not toposched's: no node has 24
		// RDMA NICs.
		{name: "nic-starved", gpus: 1, rdmaAnnot: "24", fits: false},
	}
	start := time.Now()
	for _, p := range wave1 {
		c.createPod(sn, p)
	}
	v.waitBound(wave1, 3*time.Minute)
	t.Logf("wave 1: %d pods bound in %s", len(wave1)-1, time.Since(start).Round(time.Millisecond))
	all := append([]podSpec{}, wave1...)
	t.Run("PlaceParity", func(t *testing.T) {
		if probe, ok := c.checkPlaceParity(t, sn, "gpu-oci-h100"); ok {
			all = append(all, probe)
		}
	})
	// A bound pod's devices never change afterwards, whatever the sessions do.
	firstSeen := c.allocations(podNames(all))

	t.Run("Gang", func(t *testing.T) { v.checkGang(t, &all, pd) })
	t.Run("Preemption", func(t *testing.T) { v.checkPreemption(t, &all) })

	// Both replicas down: with extender.ignorable false a GPU task fails predicate and waits;
	// nothing lands unrecorded. Then both come back and it lands.
	t.Run("ExtenderDown", func(t *testing.T) {
		defer c.as(t)()
		for name, r := range c.replicas {
			r.proc.Kill9()
			c.proxy.SetEndpoint(name, 0)
		}
		down := podSpec{name: "while-down-0", gpus: 2, rdmaRes: 2, fits: true}
		c.createPod(sn, down)
		all = append(all, down)
		// Several sessions (schedule period 1 s) see it with no extender.
		time.Sleep(8 * time.Second)
		if n := c.nodeOf(down.name); n != "" {
			t.Errorf("%s bound to %s while no toposched replica was up (extender.ignorable: false)", down.name, n)
		}
		if a := c.annotated([]string{down.name}); len(a) != 0 {
			t.Errorf("%s carries an allocation while no replica was up: %v", down.name, a)
		}
		for name := range c.replicas {
			r := c.startReplica(name)
			c.waitReady(r, 90*time.Second)
		}
		leader = c.waitLeader(60 * time.Second)
		start := time.Now()
		v.waitBound([]podSpec{down}, 2*time.Minute)
		t.Logf("%s bound %s after both replicas were back (leader %s)", down.name, time.Since(start).Round(time.Millisecond), leader)
	})

	// The leader killed with SIGKILL once the first pod of a wave is bound.
	// (Only the DGX-2H has room for more GPUs without NICs; it has no RDMA NIC.)
	t.Run("LeaderKill", func(t *testing.T) {
		defer c.as(t)()
		wave := []podSpec{
			{name: "gpu4-0", gpus: 4, fits: true},
			{name: "gpu2-annot-1", gpus: 2, rdmaAnnot: "1", fits: true},
			{name: "gpu1-2", gpus: 1, fits: true},
			{name: "decode-1", gpus: 1, labels: pd("pd-a", "decode"), fits: true},
		}
		for _, p := range wave {
			c.createPod(sn, p)
		}
		all = append(all, wave...)
		c.waitAnyBound(wave, 60*time.Second)
		old := leader
		c.replicas[old].proc.Kill9()
		killedAt := time.Now()
		var follower string
		for name := range c.replicas {
			if name != old {
				follower = name
			}
		}
		err := harness.Eventually(60*time.Second, 200*time.Millisecond, func() (bool, error) {
			eps := c.leaderPods()
			return len(eps) == 1 && eps[0] == follower && strings.HasPrefix(c.leaseHolder(), follower),
				fmt.Errorf("labelled %v, lease holder %q", eps, c.leaseHolder())
		})
		if err != nil {
			t.Fatalf("the follower %s did not take over: %v\n%s", follower, err, c.replicas[follower].proc.Tail(4000))
		}
		t.Logf("follower %s took over %s after the kill", follower, time.Since(killedAt).Round(time.Millisecond))
		v.waitBound(wave, 3*time.Minute)
		leader = follower
		// The killed replica comes back in its pod and stays a follower.
		c.proxy.SetEndpoint(old, 0)
		r := c.startReplica(old)
		c.waitReady(r, 90*time.Second)
	})

	// vc-scheduler killed with SIGKILL mid-wave and started again: nothing lost, nothing doubled.
	t.Run("SchedulerRestart", func(t *testing.T) {
		defer c.as(t)()
		wave := []podSpec{
			{name: "gpu2-2", gpus: 2, fits: true},
			{name: "gpu1-3", gpus: 1, fits: true},
			{name: "gpu1-4", gpus: 1, fits: true},
			{name: "decode-2", gpus: 1, labels: pd("pd-a", "decode"), fits: true},
		}
		for _, p := range wave {
			c.createPod(sn, p)
		}
		all = append(all, wave...)
		c.waitAnyBound(wave, 60*time.Second)
		v.sched.Kill9()
		<-v.sched.Done()
		v.startScheduler()
		v.waitBound(wave, 3*time.Minute)
	})

	// (No HAMi share, nvidia.com/gpumem and gpucores, through Volcano: vc-scheduler v1.13.3
	// counts them as scalar resources no node advertises, so the pod's PodGroup is never
	// enqueued; docs/install.md. Shares under Volcano are Volcano's own vGPU: TestVolcanoVgpu.)

	// Every verb the configuration names that a run like this one calls was answered 200.
	answered := c.proxy.Answered()
	for _, verb := range []string{"predicate", "prioritize", "allocate", "deallocate", "onSessionClose"} {
		if answered["/volcano/"+verb][200] == 0 {
			t.Errorf("verb %s named by the chart's volcano-scheduler.conf: never answered 200 (answers: %v)", verb, answered)
		}
	}
	t.Logf("extender calls by path and status: %v", answered)

	c.assertPlacements(all)
	c.assertUnchanged(firstSeen)
	c.assertReplicaState(leader)
	if m := c.proxy.MultipleEndpoints(); len(m) > 0 {
		t.Errorf("the extender Service selected more than one pod %d times, first: %s", len(m), m[0])
	}
	t.Run("HAMiDecoder", func(t *testing.T) { c.assertHAMi(t, all, registered, hami) })
}

// checkGang: a Prefill/Decode PodGroup with minMember = all of it, on a node where only part
// of it fits: Volcano allocates part of it in a statement and discards it; the allocate and
// deallocate events of the discarded gang leave no annotation and no held device. Once room
// appears the gang lands whole.
func (v *volcano) checkGang(t *testing.T, all *[]podSpec, pd func(pool, role string) map[string]string) {
	c := v.c
	defer c.as(t)()
	blocker := podSpec{name: "gang-blocker", gpus: 6, node: "gpu-azure-b", reserved: true, fits: true}
	c.createPod(v.schedulerName, blocker)
	v.waitBound([]podSpec{blocker}, 2*time.Minute)
	gang := []podSpec{
		{name: "gang-prefill-0", gpus: 2, rdmaRes: 2, labels: pd("pd-b", "prefill"), node: "gpu-azure-b", reserved: true, fits: true},
		{name: "gang-decode-0", gpus: 1, labels: pd("pd-b", "decode"), node: "gpu-azure-b", reserved: true, fits: true},
		{name: "gang-decode-1", gpus: 1, labels: pd("pd-b", "decode"), node: "gpu-azure-b", reserved: true, fits: true},
	}
	v.podGroup("gang-pd-b", len(gang), "default")
	for _, p := range gang {
		v.createGroupPod(p, "gang-pd-b")
	}
	isGang := func(pod string) bool {
		return strings.HasPrefix(pod, workloadNS+"/gang-") && pod != workloadNS+"/gang-blocker"
	}
	// Wait until a session allocated part of the gang and discarded it.
	var alloc, dealloc int
	err := harness.Eventually(60*time.Second, 250*time.Millisecond, func() (bool, error) {
		alloc, dealloc = 0, 0
		for _, e := range c.proxy.VolcanoEvents() {
			if !isGang(e.Pod) {
				continue
			}
			if e.Allocate {
				alloc++
			} else {
				dealloc++
			}
		}
		return alloc > 0 && dealloc > 0, fmt.Errorf("gang events: %d allocate, %d deallocate", alloc, dealloc)
	})
	if err != nil {
		t.Fatalf("vc-scheduler never allocated and discarded part of the gang: %v\n%s", err, v.sched.Tail(4000))
	}
	// A few more sessions of the same, then nothing of the gang may remain.
	time.Sleep(4 * time.Second)
	names := podNames(gang)
	for _, n := range names {
		if node := c.nodeOf(n); node != "" {
			t.Errorf("%s bound to %s though the gang cannot fit whole", n, node)
		}
	}
	// An allocate whose deallocate is still in flight may hold a pod's annotation for a moment:
	// read until the events settle, every allocate of the gang followed by its deallocate. A
	// pipelined task's allocate holds nothing (the extender answers it without devices) and its
	// statement may be committed with no deallocate to follow: it is not counted.
	err = harness.Eventually(20*time.Second, 250*time.Millisecond, func() (bool, error) {
		open := map[string]int{}
		for _, e := range c.proxy.VolcanoEvents() {
			if !isGang(e.Pod) {
				continue
			}
			if e.Allocate && e.Error == "" && !e.Pipelined {
				open[e.Pod]++
			} else if !e.Allocate {
				open[e.Pod] = 0
			}
		}
		var held []string
		for p, n := range open {
			if n > 0 {
				held = append(held, p)
			}
		}
		a := c.annotated(names)
		return len(a) == 0 && len(held) == 0, fmt.Errorf("annotated %v; allocated in a session not yet discarded: %v", a, held)
	})
	if err != nil {
		t.Errorf("the discarded gang left a trace: %v", err)
	}
	t.Logf("the gang was allocated in part %d times and discarded %d times, and left nothing", alloc, dealloc)
	// Room appears: the gang lands whole, on the one node it may use.
	c.deletePod(blocker.name)
	start := time.Now()
	v.waitBound(gang, 2*time.Minute)
	for _, p := range gang {
		if n := c.nodeOf(p.name); n != "gpu-azure-b" {
			t.Errorf("%s bound to %s, want gpu-azure-b", p.name, n)
		}
	}
	t.Logf("the gang landed whole %s after the blocker went", time.Since(start).Round(time.Millisecond))
	blocker.victim = true // gone: assertPlacements checks it is
	*all = append(*all, blocker)
	*all = append(*all, gang...)
}

// waitAnyBound waits until at least one of specs is bound.
func (c *cluster) waitAnyBound(specs []podSpec, timeout time.Duration) {
	c.t.Helper()
	err := harness.Eventually(timeout, 100*time.Millisecond, func() (bool, error) {
		for _, p := range specs {
			if c.nodeOf(p.name) != "" {
				return true, nil
			}
		}
		return false, fmt.Errorf("none of %v bound", podNames(specs))
	})
	if err != nil {
		c.t.Fatal(err)
	}
}

// allocations are the toposched.io/allocation annotations of the named pods that have one.
func (c *cluster) allocations(names []string) map[string]string {
	out := map[string]string{}
	for _, n := range names {
		pod, err := c.cp.Admin.CoreV1().Pods(workloadNS).Get(context.Background(), n, metav1.GetOptions{})
		if err != nil {
			continue
		}
		if a, ok := pod.Annotations["toposched.io/allocation"]; ok && pod.Spec.NodeName != "" {
			out[n] = a
		}
	}
	return out
}

// assertUnchanged: every pod of before that still exists carries the same allocation.
func (c *cluster) assertUnchanged(before map[string]string) {
	now := c.allocations(keysOf(before))
	for n, a := range before {
		if _, err := c.cp.Admin.CoreV1().Pods(workloadNS).Get(context.Background(), n, metav1.GetOptions{}); isNotFound(err) {
			continue
		}
		if now[n] != a {
			c.t.Errorf("%s: a running pod's devices changed:\n before: %s\n  after: %s", n, a, now[n])
		}
	}
}

func keysOf(m map[string]string) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// checkPreemption: on the reserved 4-GPU node a low-priority pod runs. A pod of the same
// priority that needs the node waits (Volcano's priority plugin names no victim, and the
// extender, asked after it, has no say); a high-priority one gets the node: Volcano's preempt
// action evicts the victim and pipelines the preemptor, and toposched gives the preemptor the
// victim's devices only once the victim is going (never two pods on one device).
func (v *volcano) checkPreemption(t *testing.T, all *[]podSpec) {
	c := v.c
	defer c.as(t)()
	ctx := context.Background()
	low := podSpec{name: "lassen-low-0", gpus: 4, rdmaRes: 4, node: "gpu-lassen", reserved: true, fits: true}
	c.createPod(v.schedulerName, low)
	v.waitBound([]podSpec{low}, 2*time.Minute)
	lowUID := c.podUID(low.name)

	same := podSpec{name: "lassen-same-0", gpus: 4, rdmaRes: 4, node: "gpu-lassen", reserved: true}
	c.createPod(v.schedulerName, same)
	time.Sleep(8 * time.Second) // several sessions with the preempt action
	if n := c.nodeOf(same.name); n != "" {
		t.Errorf("%s (same priority) bound to %s", same.name, n)
	}
	if uid := c.podUID(low.name); uid != lowUID {
		t.Fatalf("%s was evicted for a pod of the same priority", low.name)
	}
	c.deletePod(same.name)

	high := &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: "e2e-high"}, Value: 1000000}
	if _, err := c.cp.Admin.SchedulingV1().PriorityClasses().Create(ctx, high, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	urgent := podSpec{name: "urgent", gpus: 4, rdmaRes: 4, node: "gpu-lassen", reserved: true, priority: "e2e-high", fits: true}
	start := time.Now()
	c.createPod(v.schedulerName, urgent)
	// Watch the victim go: the time its deletion was first seen.
	var evictedAt time.Time
	err := harness.Eventually(3*time.Minute, 100*time.Millisecond, func() (bool, error) {
		p, err := c.cp.Admin.CoreV1().Pods(workloadNS).Get(ctx, low.name, metav1.GetOptions{})
		if evictedAt.IsZero() && (isNotFound(err) || (err == nil && p.DeletionTimestamp != nil)) {
			evictedAt = time.Now()
		}
		return c.nodeOf(urgent.name) != "", fmt.Errorf("urgent not bound (victim deletion seen: %v)", !evictedAt.IsZero())
	})
	if err != nil {
		t.Fatalf("%v\n--- vc-scheduler log tail:\n%s", err, v.sched.Tail(6000))
	}
	t.Logf("preemption: urgent bound in %s", time.Since(start).Round(time.Millisecond))
	if _, err := c.cp.Admin.CoreV1().Pods(workloadNS).Get(ctx, low.name, metav1.GetOptions{}); !isNotFound(err) {
		t.Errorf("the victim %s is still there (%v)", low.name, err)
	}
	// The preemptor got devices only once the eviction had begun: an allocate answered before
	// would have handed the victim's devices out twice.
	for _, e := range c.proxy.VolcanoEvents() {
		if e.Pod == workloadNS+"/"+urgent.name && e.Allocate && e.Error == "" {
			if evictedAt.IsZero() || e.At.Before(evictedAt.Add(-time.Second)) {
				t.Errorf("urgent was allocated on %s at %s, before the victim's eviction was seen (%s)", e.Node, e.At.Format(time.RFC3339Nano), evictedAt.Format(time.RFC3339Nano))
			}
			break
		}
	}
	low.victim = true
	*all = append(*all, low, urgent)
}

// podUID is the UID of workload pod name ("" when it is gone).
func (c *cluster) podUID(name string) string {
	pod, err := c.cp.Admin.CoreV1().Pods(workloadNS).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		return ""
	}
	return string(pod.UID)
}
