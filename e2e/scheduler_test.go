package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"toposched.io/e2e/harness"
)

const workloadNS = "workload"

// allocation is the toposched.io/allocation annotation (docs/operations.md, "What a bind writes").
type allocation struct {
	Version int    `json:"version"`
	Node    string `json:"node"`
	GPUs    []struct {
		Index        int    `json:"index"`
		PCIBusID     string `json:"pciBusId"`
		UUID         string `json:"uuid"`
		MemoryMiB    int64  `json:"memoryMiB"`
		CoresPercent int    `json:"coresPercent"`
	} `json:"gpus"`
	NICs []struct {
		Name     string `json:"name"`
		PCIBusID string `json:"pciBusId"`
	} `json:"nics"`
	Links struct {
		WorstGpuNic string `json:"worstGpuNic"`
		GpuNic      []struct {
			GPU   int    `json:"gpu"`
			NIC   string `json:"nic"`
			Class string `json:"class"`
		} `json:"gpuNic"`
	} `json:"links"`
	Containers []int `json:"containers"`
}

// podSpec is one workload pod.
type podSpec struct {
	name      string
	gpus      int
	rdmaRes   int    // rdma/ib resource
	rdmaAnnot string // toposched.io/rdma-nics annotation
	labels    map[string]string
	gpumem    int    // HAMi nvidia.com/gpumem (MiB), shared GPU
	gpucores  int    // HAMi nvidia.com/gpucores
	node      string // nodeSelector kubernetes.io/hostname
	priority  string // priorityClassName
	reserved  bool   // tolerates the e2e/reserved taint
	victim    bool   // expected to be preempted (deleted)
	fits      bool
	amd       bool // asks amd.com/gpu instead of nvidia.com/gpu
}

func (p podSpec) nics() int {
	if p.rdmaRes > 0 {
		return p.rdmaRes
	}
	n, _ := strconv.Atoi(p.rdmaAnnot)
	return n
}

func (p podSpec) shared() bool { return p.gpumem > 0 || p.gpucores > 0 }

func (c *cluster) createPod(schedulerName string, p podSpec) {
	if _, err := c.cp.Admin.CoreV1().Pods(workloadNS).Create(context.Background(), c.podObject(schedulerName, p), metav1.CreateOptions{}); err != nil {
		c.t.Fatalf("create pod %s: %v", p.name, err)
	}
}

func (c *cluster) podObject(schedulerName string, p podSpec) *corev1.Pod {
	gpuResource := corev1.ResourceName("nvidia.com/gpu")
	if p.amd {
		gpuResource = "amd.com/gpu"
	}
	limits := corev1.ResourceList{gpuResource: *resource.NewQuantity(int64(p.gpus), resource.DecimalSI)}
	if p.rdmaRes > 0 {
		limits["rdma/ib"] = *resource.NewQuantity(int64(p.rdmaRes), resource.DecimalSI)
	}
	if p.gpumem > 0 {
		limits["nvidia.com/gpumem"] = *resource.NewQuantity(int64(p.gpumem), resource.DecimalSI)
	}
	if p.gpucores > 0 {
		limits["nvidia.com/gpucores"] = *resource.NewQuantity(int64(p.gpucores), resource.DecimalSI)
	}
	ann := map[string]string{}
	if p.rdmaAnnot != "" {
		ann["toposched.io/rdma-nics"] = p.rdmaAnnot
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: p.name, Namespace: workloadNS, Labels: p.labels, Annotations: ann},
		Spec: corev1.PodSpec{
			SchedulerName:     schedulerName,
			NodeSelector:      nodeSelector(p.node),
			Tolerations:       tolerations(p.reserved),
			PriorityClassName: p.priority,
			Containers: []corev1.Container{{
				Name: "main", Image: "registry.k8s.io/pause:3.10",
				Resources: corev1.ResourceRequirements{Limits: limits},
			}},
		},
	}
	pod.APIVersion, pod.Kind = "v1", "Pod"
	return pod
}

var reservedTaint = corev1.Taint{Key: "e2e.toposched.io/reserved", Value: "preemption", Effect: corev1.TaintEffectNoSchedule}

func tolerations(reserved bool) []corev1.Toleration {
	if !reserved {
		return nil
	}
	return []corev1.Toleration{{Key: reservedTaint.Key, Operator: corev1.TolerationOpEqual, Value: reservedTaint.Value, Effect: reservedTaint.Effect}}
}

func nodeSelector(node string) map[string]string {
	if node == "" {
		return nil
	}
	return map[string]string{"kubernetes.io/hostname": node}
}

func (c *cluster) waitBound(specs []podSpec, timeout time.Duration) {
	c.t.Helper()
	c.waitBoundOr(specs, timeout, func() string {
		return "--- kube-scheduler log tail:\n" + harness.TailFile(c.out+"/kube-scheduler.log", 4000)
	})
}

// waitBoundOr waits until every pod of specs that fits is bound, or fails the test with the
// pods left and logs().
func (c *cluster) waitBoundOr(specs []podSpec, timeout time.Duration, logs func() string) {
	c.t.Helper()
	err := harness.Eventually(timeout, 500*time.Millisecond, func() (bool, error) {
		var pending []string
		for _, p := range specs {
			if !p.fits {
				continue
			}
			pod, err := c.cp.Admin.CoreV1().Pods(workloadNS).Get(context.Background(), p.name, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			if pod.Spec.NodeName == "" {
				pending = append(pending, p.name)
			}
		}
		if len(pending) > 0 {
			return false, fmt.Errorf("not bound: %s", strings.Join(pending, ", "))
		}
		return true, nil
	})
	if err != nil {
		c.t.Fatalf("%v\n%s", err, logs())
	}
}

// TestKubeScheduler: the real kube-scheduler with the chart's KubeSchedulerConfiguration calls
// two toposched replicas (leader-elected, chart ServiceAccounts and RBAC) over kwok nodes whose
// hardware is real topology exports; the leader is killed with SIGKILL mid-run.
func TestKubeScheduler(t *testing.T) {
	c := newCluster(t, "TestKubeScheduler")
	ctx := context.Background()
	dgx := &gpuNode{Name: "gpu-dgx2h", File: "hwloc__nvidia-dgx2h_16xV100_12xNVSwitch.hwloc2.xml", Labels: map[string]string{"toposched.io/leaf": "leaf-3", "toposched.io/spine": "spine-1"}}
	c.addNodes([]*gpuNode{
		{Name: "gpu-azure-a", File: "azure__nd-a100-v4_8xA100_8xCX6.nccl.xml", Labels: map[string]string{"toposched.io/leaf": "leaf-1", "toposched.io/spine": "spine-1"}},
		{Name: "gpu-azure-b", File: "azure__nd-a100-v4_8xA100_8xCX6.nccl.xml", Labels: map[string]string{"toposched.io/leaf": "leaf-1", "toposched.io/spine": "spine-1"}},
		{Name: "gpu-oci-h100", File: "oci__bm.gpu.h100.8_kubernetes-variant.nccl.xml", Labels: map[string]string{"toposched.io/leaf": "leaf-2", "toposched.io/spine": "spine-1"}},
		// Reserved (tainted) for the preemption round: only pods that tolerate it land there.
		{Name: "gpu-lassen", File: "llnl__lassen_ibm-ac922_power9_4xV100_4xmlx5.hwloc2.xml", Labels: map[string]string{"toposched.io/leaf": "leaf-2", "toposched.io/spine": "spine-1"},
			Taints: []corev1.Taint{reservedTaint}},
		dgx,
	})
	// HAMi's device plugin registers the DGX-2H's sixteen 32 GB V100s (the export names the
	// model, Tesla V100-SXM3-32GB-H, and carries every GPU's UUID; it has no memory size).
	registered := c.registerHAMi(dgx, 32768, "Tesla V100-SXM3-32GB-H")
	c.startAgents()
	c.checkPublishedTopologies()
	c.checkPrinterColumns()
	// HAMi's device plugin runs on the DGX-2H only (the chart's default hamiNodeLock, auto,
	// takes HAMi's node lock exactly there).
	hami := startHAMiPlugin(c, dgx.Name)

	podA, podB := c.extDep.Name+"-e2e-a", c.extDep.Name+"-e2e-b"
	leader := c.startReplicas(podA, podB)
	t.Logf("leader: %s (lease holder %s)", leader, c.leaseHolder())
	if !t.Run("MutualTLS", func(t *testing.T) { c.checkMutualTLS(t, leader) }) {
		t.Fatal("the chart's TLS is not what the scheduler run below needs (subtest MutualTLS)")
	}

	c.cp.EnsureNamespace(t, workloadNS)
	schedulerName := c.startScheduler()

	pd := func(role string) map[string]string {
		return map[string]string{"llm-d.ai/role": role, "toposched.io/pool": "pd-a"}
	}
	wave1 := []podSpec{
		{name: "train-rdma4-0", gpus: 4, rdmaRes: 4, fits: true},
		{name: "gpu2-annot-0", gpus: 2, rdmaAnnot: "2", fits: true},
		{name: "gpu2-annot-1", gpus: 2, rdmaAnnot: "1", fits: true},
		{name: "gpu1-0", gpus: 1, fits: true},
		{name: "gpu1-1", gpus: 1, fits: true},
		{name: "prefill-0", gpus: 2, rdmaRes: 2, labels: pd("prefill"), fits: true},
		{name: "decode-0", gpus: 1, labels: pd("decode"), fits: true},
		{name: "decode-1", gpus: 1, labels: pd("decode"), fits: true},
		{name: "too-big", gpus: 32, fits: false},
		// Fits kube-scheduler's own filters (GPU nodes have a GPU), not toposched's: no node has
		// 24 RDMA NICs. The filter that leaves it no node gives it a FailedScheduling summary.
		{name: "nic-starved", gpus: 1, rdmaAnnot: "24", fits: false},
		{name: "shared-0", gpus: 1, gpumem: 8000, gpucores: 30, node: "gpu-dgx2h", fits: true},
		{name: "shared-1", gpus: 1, gpumem: 8000, gpucores: 30, node: "gpu-dgx2h", fits: true},
		{name: "shared-2", gpus: 1, gpumem: 4000, gpucores: 50, node: "gpu-dgx2h", fits: true},
		{name: "gpu2-dgx-0", gpus: 2, node: "gpu-dgx2h", fits: true},
		// One low-priority pod fills the reserved node. (With two, kube-scheduler v1.37.2's
		// asynchronous preemption was seen to leave the preemptor unschedulable for minutes:
		// a second attempt ran while its cache still held the second victim, "preempted" it
		// again ("Victim Pod is already deleted") and nothing requeued the pod afterwards.)
		{name: "lassen-low-0", gpus: 4, rdmaRes: 4, node: "gpu-lassen", reserved: true, fits: true},
	}
	wave2 := []podSpec{
		{name: "train-rdma4-1", gpus: 4, rdmaRes: 4, fits: true},
		{name: "gpu2-annot-2", gpus: 2, rdmaAnnot: "2", fits: true},
		{name: "gpu1-2", gpus: 1, fits: true},
		{name: "gpu1-3", gpus: 1, fits: true},
		{name: "prefill-1", gpus: 2, rdmaRes: 2, labels: pd("prefill"), fits: true},
		{name: "decode-2", gpus: 1, labels: pd("decode"), fits: true},
		{name: "gpu4-0", gpus: 4, fits: true},
	}
	start := time.Now()
	for _, p := range wave1 {
		c.createPod(schedulerName, p)
	}
	c.waitBound(wave1, 3*time.Minute)
	t.Logf("wave 1: %d pods bound in %s", len(wave1)-2, time.Since(start).Round(time.Millisecond))
	t.Run("EventsAndExplain", func(t *testing.T) {
		c.checkEventsAndExplain(t, wave1[0], podSpec{name: "nic-starved", gpus: 1, rdmaAnnot: "24"})
	})
	// Between the waves nothing else is in flight: compare one more bind with toposched place.
	t.Run("PlaceParity", func(t *testing.T) {
		if probe, ok := c.checkPlaceParity(t, schedulerName, "gpu-oci-h100"); ok {
			wave1 = append(wave1, probe)
		}
	})

	// Wave 2, and kill -9 the leader once the first of its pods is bound.
	start = time.Now()
	for _, p := range wave2 {
		c.createPod(schedulerName, p)
	}
	_ = harness.Eventually(30*time.Second, 100*time.Millisecond, func() (bool, error) {
		for _, p := range wave2 {
			pod, err := c.cp.Admin.CoreV1().Pods(workloadNS).Get(ctx, p.name, metav1.GetOptions{})
			if err == nil && pod.Spec.NodeName != "" {
				return true, nil
			}
		}
		return false, nil
	})
	killed := c.replicas[leader]
	follower := podA
	if leader == podA {
		follower = podB
	}
	killedAt := time.Now()
	killed.proc.Kill9()
	t.Logf("killed leader %s (SIGKILL) %s into wave 2", leader, killedAt.Sub(start).Round(time.Millisecond))
	err := harness.Eventually(60*time.Second, 200*time.Millisecond, func() (bool, error) {
		eps := c.leaderPods()
		h := c.leaseHolder()
		if len(eps) == 1 && eps[0] == follower && strings.HasPrefix(h, follower) {
			return true, nil
		}
		return false, fmt.Errorf("labelled %v, lease holder %q", eps, h)
	})
	if err != nil {
		t.Fatalf("the follower %s did not take over: %v\n%s", follower, err, c.replicas[follower].proc.Tail(4000))
	}
	t.Logf("follower %s took over %s after the kill", follower, time.Since(killedAt).Round(time.Millisecond))
	c.waitBound(wave2, 3*time.Minute)
	t.Logf("wave 2: %d pods bound in %s", len(wave2), time.Since(start).Round(time.Millisecond))

	// The killed replica comes back in the same pod (what the kubelet does) and must stay a
	// follower: one leader label, held by the new leader.
	c.proxy.SetEndpoint(leader, 0)
	restarted := c.startReplica(leader)
	c.waitReady(restarted, 90*time.Second)
	time.Sleep(3 * time.Second)
	if eps := c.leaderPods(); len(eps) != 1 || eps[0] != follower {
		t.Errorf("after the old leader restarted: pods labelled leader %v, want [%s]", eps, follower)
	}

	// Preemption: a high-priority pod that fits on the reserved node only if both low-priority
	// pods there go. kube-scheduler's DefaultPreemption picks them and asks the extender's
	// preempt verb, deletes the victims (kwok finishes the deletion, as a kubelet would), and
	// the pod binds there once toposched has freed their devices.
	high := &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: "e2e-high"}, Value: 1000000}
	if _, err := c.cp.Admin.SchedulingV1().PriorityClasses().Create(ctx, high, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	urgent := podSpec{name: "urgent", gpus: 4, rdmaRes: 4, node: "gpu-lassen", reserved: true, priority: "e2e-high", fits: true}
	start = time.Now()
	c.createPod(schedulerName, urgent)
	c.waitBound([]podSpec{urgent}, 3*time.Minute)
	t.Logf("preemption: urgent bound in %s", time.Since(start).Round(time.Millisecond))
	for i := range wave1 {
		if strings.HasPrefix(wave1[i].name, "lassen-low-") {
			wave1[i].victim = true
		}
	}
	preempted := false
	for _, pr := range c.proxy.Preempts() {
		if pr.Pod == workloadNS+"/urgent" {
			if _, ok := pr.Kept["gpu-lassen"]; ok {
				preempted = true
			}
			t.Logf("preempt call for %s: offered %v, kept %v", pr.Pod, pr.Offered, pr.Kept)
		}
	}
	if !preempted {
		t.Errorf("kube-scheduler never got gpu-lassen back from the extender's preempt verb for workload/urgent (calls: %+v)", c.proxy.Preempts())
	}

	// Every verb the chart's configuration names was called and answered 200 (a verb
	// toposched does not serve answers 404 and fails here, besides stalling the pods).
	answered := c.proxy.Answered()
	withCert := c.proxy.WithClientCertificate()
	for _, path := range c.verbPaths {
		if answered[path][200] == 0 {
			t.Errorf("verb %s named by the chart's KubeSchedulerConfiguration: never answered 200 (answers: %v)", path, answered[path])
		}
		// Mutual TLS (the chart's default): kube-scheduler reached the verbs with the chart's
		// client certificate, which the replica requires (checkMutualTLS: 403 without).
		if c.tls != nil && len(c.tls.ClientCert) > 0 && withCert[path] < answered[path][200] {
			t.Errorf("verb %s: %d calls answered 200, only %d presented a verified client certificate", path, answered[path][200], withCert[path])
		}
	}
	t.Logf("extender calls by path and status: %v; with a verified client certificate: %v", answered, withCert)

	all := append(append([]podSpec{}, wave1...), wave2...)
	all = append(all, urgent)
	c.assertPlacements(all)
	c.assertReplicaState(follower)
	t.Run("HAMiDecoder", func(t *testing.T) { c.assertHAMi(t, all, registered, hami) })
	if m := c.proxy.MultipleEndpoints(); len(m) > 0 {
		t.Errorf("the extender Service selected more than one pod (two pods labelled toposched.io/leader=true) %d times, first: %s", len(m), m[0])
	}
}

// assertPlacements checks every pod against what kube-scheduler and toposched said and did.
func (c *cluster) assertPlacements(specs []podSpec) {
	t := c.t
	ctx := context.Background()
	nodes := map[string]*gpuNode{}
	for _, n := range c.nodes {
		nodes[n.Name] = n
	}
	type gpuUse struct {
		whole   bool
		cores   int
		mem     int64
		holders []string
	}
	gpuHeld := map[string]*gpuUse{}  // node/busid
	nicHeld := map[string][]string{} // node/name-or-busid
	binds := c.proxy.Binds()
	okBinds := map[string][]string{}
	lostBinds := map[string][]harness.BindRecord{}
	for _, b := range binds {
		if b.OK {
			okBinds[b.Pod] = append(okBinds[b.Pod], b.Node)
		}
		if b.Lost {
			lostBinds[b.Pod] = append(lostBinds[b.Pod], b)
		}
		if !b.OK {
			t.Logf("bind %s -> %s via %s answered: %s", b.Pod, b.Node, b.Replica, b.Error)
		}
	}
	allocatedOn := map[string]map[string]bool{}
	for _, e := range c.proxy.VolcanoEvents() {
		if e.Allocate && e.Error == "" {
			if allocatedOn[e.Pod] == nil {
				allocatedOn[e.Pod] = map[string]bool{}
			}
			allocatedOn[e.Pod][e.Node] = true
		}
	}
	freeGPUs := map[string]int{}
	freeNICs := map[string]int{}
	for _, n := range c.nodes {
		freeGPUs[n.Name] = len(n.Topo.Status.GPUs)
		freeNICs[n.Name] = n.rdmaNICs()
	}
	for _, p := range specs {
		key := workloadNS + "/" + p.name
		pod, err := c.cp.Admin.CoreV1().Pods(workloadNS).Get(ctx, p.name, metav1.GetOptions{})
		if p.victim {
			if !isNotFound(err) {
				t.Errorf("%s: a preemption victim, still there (%v)", key, err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", key, err)
			continue
		}
		if pod.Spec.NodeName == "" {
			if p.fits {
				t.Errorf("%s: not bound", key)
			}
			if _, ok := pod.Annotations["toposched.io/allocation"]; ok {
				t.Errorf("%s: unbound but carries toposched.io/allocation", key)
			}
			continue
		}
		if !p.fits {
			t.Errorf("%s: bound to %s, but it cannot fit anywhere", key, pod.Spec.NodeName)
		}
		node := nodes[pod.Spec.NodeName]
		if node == nil {
			t.Errorf("%s: bound to %s, not a GPU node", key, pod.Spec.NodeName)
			continue
		}
		if !c.proxy.FilterPassed(key)[pod.Spec.NodeName] {
			t.Errorf("%s: bound to %s, which toposched's filter never passed for it (passed: %v)", key, pod.Spec.NodeName, c.proxy.FilterPassed(key))
		}
		if c.volcano {
			// Volcano binds the pod itself; toposched decided its devices at the session's
			// allocate event for that node (an earlier allocate elsewhere may have been
			// discarded with its statement).
			if !allocatedOn[key][pod.Spec.NodeName] {
				t.Errorf("%s: bound to %s without an allocate call answered without error there (allocated: %v)", key, pod.Spec.NodeName, allocatedOn[key])
			}
		} else if got := okBinds[key]; len(got) == 0 {
			// Only a bind whose answer was lost with the killed leader may have bound it.
			lostHere := false
			for _, b := range lostBinds[key] {
				lostHere = lostHere || b.Node == pod.Spec.NodeName
			}
			if !lostHere {
				t.Errorf("%s: bound to %s without a successful extender bind call", key, pod.Spec.NodeName)
			} else {
				t.Logf("%s: bound to %s by a bind whose answer died with the leader (%v)", key, pod.Spec.NodeName, lostBinds[key])
			}
		} else {
			for _, n := range got {
				if n != pod.Spec.NodeName {
					t.Errorf("%s: extender binds answered success for %v, but the pod is on %s", key, got, pod.Spec.NodeName)
				}
			}
		}
		raw, ok := pod.Annotations["toposched.io/allocation"]
		if !ok {
			t.Errorf("%s: bound without toposched.io/allocation", key)
			continue
		}
		for _, a := range []string{"toposched.io/visible-gpus", "toposched.io/nccl-ib-hca", "toposched.io/bind-time"} {
			if _, ok := pod.Annotations[a]; !ok {
				t.Errorf("%s: missing annotation %s", key, a)
			}
		}
		var al allocation
		if err := json.Unmarshal([]byte(raw), &al); err != nil {
			t.Errorf("%s: toposched.io/allocation does not parse: %v: %s", key, err, raw)
			continue
		}
		if al.Node != pod.Spec.NodeName {
			t.Errorf("%s: allocation names node %q, pod is on %q", key, al.Node, pod.Spec.NodeName)
		}
		if len(al.GPUs) != p.gpus {
			t.Errorf("%s: allocation has %d GPUs, the pod asked for %d: %s", key, len(al.GPUs), p.gpus, raw)
		}
		if len(al.NICs) != p.nics() {
			t.Errorf("%s: allocation has %d NICs, the pod asked for %d: %s", key, len(al.NICs), p.nics(), raw)
		}
		freeGPUs[node.Name] -= len(al.GPUs)
		freeNICs[node.Name] -= len(al.NICs)
		for _, g := range al.GPUs {
			found := false
			for _, tg := range node.Topo.Status.GPUs {
				if tg.PCIBusID == g.PCIBusID {
					found = true
					if tg.Index != g.Index || (tg.UUID != "" && tg.UUID != g.UUID) {
						t.Errorf("%s: GPU %s: index/uuid %d/%s, the node's topology has %d/%s", key, g.PCIBusID, g.Index, g.UUID, tg.Index, tg.UUID)
					}
				}
			}
			if !found {
				t.Errorf("%s: GPU %s does not exist on %s", key, g.PCIBusID, node.Name)
			}
			k := node.Name + "/" + g.PCIBusID
			u := gpuHeld[k]
			if u == nil {
				u = &gpuUse{}
				gpuHeld[k] = u
			}
			u.holders = append(u.holders, p.name)
			if p.shared() {
				u.cores += g.CoresPercent
				u.mem += g.MemoryMiB
			} else {
				u.whole = true
			}
		}
		for _, n := range al.NICs {
			found := false
			for _, tn := range node.Topo.Status.NICs {
				if (n.Name != "" && tn.Name == n.Name) || (n.Name == "" && tn.Name == "" && tn.PCIBusID == n.PCIBusID) {
					found = true
					if tn.PCIBusID != n.PCIBusID {
						t.Errorf("%s: NIC %s: bus id %s, the node's topology has %s", key, n.Name, n.PCIBusID, tn.PCIBusID)
					}
				}
			}
			if !found {
				t.Errorf("%s: NIC %q (%s) does not exist on %s", key, n.Name, n.PCIBusID, node.Name)
			}
			id := n.Name
			if id == "" {
				id = "bus:" + n.PCIBusID
			}
			nicHeld[node.Name+"/"+id] = append(nicHeld[node.Name+"/"+id], p.name)
		}
		c.checkLinkClasses(key, node, &al)
		if want := p.nics(); want > 0 {
			hca := pod.Annotations["toposched.io/nccl-ib-hca"]
			var names []string
			for _, n := range al.NICs {
				if n.Name != "" {
					names = append(names, n.Name)
				}
			}
			if len(names) == len(al.NICs) {
				sort.Strings(names)
				got := strings.Split(strings.TrimPrefix(hca, "="), ",")
				sort.Strings(got)
				if !strings.HasPrefix(hca, "=") || strings.Join(got, ",") != strings.Join(names, ",") {
					t.Errorf("%s: toposched.io/nccl-ib-hca = %q, the allocation's NICs are %v", key, hca, names)
				}
			}
		}
	}
	for k, u := range gpuHeld {
		if u.whole && len(u.holders) > 1 {
			t.Errorf("GPU %s held by %d pods: %v", k, len(u.holders), u.holders)
		}
		if u.cores > 100 {
			t.Errorf("GPU %s: shared pods hold %d%% of its cores: %v", k, u.cores, u.holders)
		}
	}
	for k, holders := range nicHeld {
		if len(holders) > 1 {
			t.Errorf("RDMA NIC %s held by %d pods: %v", k, len(holders), holders)
		}
	}
	// Every pod that fits is bound: a pending pod must not fit on any node's free devices.
	for _, p := range specs {
		pod, err := c.cp.Admin.CoreV1().Pods(workloadNS).Get(ctx, p.name, metav1.GetOptions{})
		if err != nil || pod.Spec.NodeName != "" {
			continue
		}
		for n, g := range freeGPUs {
			if g >= p.gpus && freeNICs[n] >= p.nics() && p.rdmaRes <= freeNICs[n] {
				t.Errorf("%s: pending, but %s has %d free GPUs and %d free RDMA NICs", p.name, n, g, freeNICs[n])
			}
		}
	}
	if c.volcano {
		t.Logf("%d pods allocated through Volcano's allocate events", len(allocatedOn))
		return
	}
	t.Logf("%d successful extender binds, %d bind calls in all", func() int {
		n := 0
		for _, v := range okBinds {
			n += len(v)
		}
		return n
	}(), len(binds))
}

var pcieClassRank = map[string]int{"PIX": 0, "PXB": 1, "PHB": 2, "NODE": 3, "SYS": 4}

// checkLinkClasses: the allocation's GPU->NIC pairs name each chosen GPU once, only chosen NICs,
// and each pair's class is the node's real class for that GPU and NIC (the topology's matrix,
// as `toposched topo` derives it from the export); worstGpuNic is the worst of them.
func (c *cluster) checkLinkClasses(key string, node *gpuNode, al *allocation) {
	t := c.t
	if len(al.NICs) == 0 {
		if len(al.Links.GpuNic) != 0 {
			t.Errorf("%s: GPU->NIC pairs %v without NICs", key, al.Links.GpuNic)
		}
		return
	}
	if len(al.Links.GpuNic) != len(al.GPUs) {
		t.Errorf("%s: %d GPU->NIC pairs for %d GPUs", key, len(al.Links.GpuNic), len(al.GPUs))
	}
	chosen := map[int]bool{}
	for _, g := range al.GPUs {
		chosen[g.Index] = true
	}
	worst := ""
	for _, pr := range al.Links.GpuNic {
		if !chosen[pr.GPU] {
			t.Errorf("%s: GPU->NIC pair names GPU %d, not one of the allocation's", key, pr.GPU)
			continue
		}
		delete(chosen, pr.GPU)
		nic := -1
		for i, tn := range node.Topo.Status.NICs {
			if (tn.Name != "" && tn.Name == pr.NIC) || tn.PCIBusID == pr.NIC {
				nic = i
			}
		}
		if nic < 0 {
			t.Logf("%s: GPU->NIC pair names NIC %q, which is neither a NIC name nor a bus id of %s: class not checked", key, pr.NIC, node.Name)
			continue
		}
		inAlloc := false
		for _, n := range al.NICs {
			inAlloc = inAlloc || (n.Name != "" && n.Name == node.Topo.Status.NICs[nic].Name) || (n.Name == "" && n.PCIBusID == node.Topo.Status.NICs[nic].PCIBusID)
		}
		if !inAlloc {
			t.Errorf("%s: GPU->NIC pair names NIC %q, not one of the allocation's", key, pr.NIC)
		}
		gi := -1
		for i, tg := range node.Topo.Status.GPUs {
			if tg.Index == pr.GPU {
				gi = i
			}
		}
		m := node.Topo.Status.Links.GPUNic
		if gi < 0 || gi >= len(m) || nic >= len(m[gi]) {
			t.Errorf("%s: no topology class for GPU %d / NIC %q", key, pr.GPU, pr.NIC)
			continue
		}
		if want := m[gi][nic]; pr.Class != want {
			t.Errorf("%s: GPU %d -> NIC %s: allocation says %s, the node's topology says %s", key, pr.GPU, pr.NIC, pr.Class, want)
		}
		if worst == "" || pcieClassRank[pr.Class] > pcieClassRank[worst] {
			worst = pr.Class
		}
	}
	if worst != "" && al.Links.WorstGpuNic != worst {
		t.Errorf("%s: worstGpuNic %s, the worst pair is %s", key, al.Links.WorstGpuNic, worst)
	}
}

// placeResult is the part of `toposched place --format json` compared here.
type placeResult struct {
	Fits       bool   `json:"fits"`
	WorstClass string `json:"worstClass"`
	ClassSum   int    `json:"classSum"`
	GPUs       []struct {
		PCIBusID string `json:"pciBusId"`
	} `json:"gpus"`
	Pairs []struct {
		GPU   int    `json:"gpu"`
		NIC   string `json:"nic"`
		Class string `json:"class"`
	} `json:"pairs"`
}

// checkPlaceParity binds one more pod to node (nothing else is being scheduled then, so the
// node's state is exactly the allocations its bound pods carry) and compares the GPU->NIC
// classes the extender chose with what `toposched place` picks for the same topology file,
// the same taken devices, the same request and the chart's scheduling configuration.
func (c *cluster) checkPlaceParity(t *testing.T, schedulerName, nodeName string) (probe podSpec, created bool) {
	// The helpers below fail c.t; within this subtest that must be t.
	parent := c.t
	c.t = t
	defer func() { c.t = parent }()
	ctx := context.Background()
	var node *gpuNode
	for _, n := range c.nodes {
		if n.Name == nodeName {
			node = n
		}
	}
	pods, err := c.cp.Admin.CoreV1().Pods(workloadNS).List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + nodeName})
	if err != nil {
		t.Fatal(err)
	}
	taken := map[string]any{"exclusiveGpus": []string{}, "usedNics": []string{}}
	gpusTaken, nicsTaken := 0, 0
	for _, pod := range pods.Items {
		var al allocation
		if err := json.Unmarshal([]byte(pod.Annotations["toposched.io/allocation"]), &al); err != nil {
			t.Fatalf("%s: allocation: %v", pod.Name, err)
		}
		for _, g := range al.GPUs {
			taken["exclusiveGpus"] = append(taken["exclusiveGpus"].([]string), g.PCIBusID)
			gpusTaken++
		}
		for _, n := range al.NICs {
			taken["usedNics"] = append(taken["usedNics"].([]string), n.Name)
			nicsTaken++
		}
	}
	free := len(node.Topo.Status.GPUs) - gpusTaken
	if freeNICs := node.rdmaNICs() - nicsTaken; freeNICs < free {
		free = freeNICs
	}
	if free > 2 {
		free = 2
	}
	if free < 1 {
		t.Skipf("%s has no free GPU and NIC left for the probe pod", nodeName)
	}
	probe = podSpec{name: "place-probe", gpus: free, rdmaRes: free, node: nodeName, fits: true}
	allocPath := filepath.Join(c.out, "place-allocated.json")
	b, _ := json.Marshal(taken)
	if err := os.WriteFile(allocPath, b, 0o644); err != nil {
		t.Fatal(err)
	}
	reqPath := filepath.Join(c.out, "place-request.json")
	rb, _ := json.Marshal(c.podObject(schedulerName, probe))
	if err := os.WriteFile(reqPath, rb, 0o644); err != nil {
		t.Fatal(err)
	}
	var cfgPath string
	for _, r := range c.replicas {
		matches, _ := filepath.Glob(filepath.Join(c.out, "mounts", r.pod, "*", "*", "*", "*.yaml"))
		if len(matches) > 0 {
			cfgPath = matches[0]
		}
	}
	args := []string{"place", "--topology", node.File, "--request", reqPath, "--allocated", allocPath, "--format", "json"}
	if cfgPath != "" {
		args = append(args, "--config", cfgPath)
	}
	out, err := harness.Run(ctx, time.Minute, nil, c.peers.Toposched, args...)
	if err != nil {
		t.Fatalf("toposched %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	var want placeResult
	if err := json.Unmarshal([]byte(out), &want); err != nil || !want.Fits {
		t.Fatalf("toposched place: fits=%v err=%v\n%s", want.Fits, err, out)
	}

	c.createPod(schedulerName, probe)
	created = true
	c.waitBound([]podSpec{probe}, 2*time.Minute)
	pod, err := c.cp.Admin.CoreV1().Pods(workloadNS).Get(ctx, probe.name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if pod.Spec.NodeName != nodeName {
		t.Fatalf("probe bound to %s, want %s", pod.Spec.NodeName, nodeName)
	}
	var got allocation
	if err := json.Unmarshal([]byte(pod.Annotations["toposched.io/allocation"]), &got); err != nil {
		t.Fatal(err)
	}
	classes := func(xs []string) string { sort.Strings(xs); return strings.Join(xs, ",") }
	var wantC, gotC []string
	for _, p := range want.Pairs {
		wantC = append(wantC, p.Class)
	}
	for _, p := range got.Links.GpuNic {
		gotC = append(gotC, p.Class)
	}
	if classes(wantC) != classes(gotC) || want.WorstClass != got.Links.WorstGpuNic {
		t.Errorf("on %s with %s taken: the extender's GPU->NIC classes are %v (worst %s), toposched place's %v (worst %s)",
			nodeName, b, gotC, got.Links.WorstGpuNic, wantC, want.WorstClass)
	}
	var wantG, gotG []string
	for _, g := range want.GPUs {
		wantG = append(wantG, g.PCIBusID)
	}
	for _, g := range got.GPUs {
		gotG = append(gotG, g.PCIBusID)
	}
	t.Logf("%s: probe with %d GPUs/NICs: classes %v (worst %s), toposched place's %v (worst %s); GPUs %v, place's %v",
		nodeName, free, gotC, got.Links.WorstGpuNic, wantC, want.WorstClass, gotG, wantG)
	return probe, created
}

// metricSum scrapes a replica's /metrics and sums the samples of one metric (all label sets);
// found is false when the metric is absent.
func (c *cluster) metricSum(port int, name string) (sum float64, found bool, err error) {
	code, body, err := c.replicaGet(port, "/metrics")
	if err != nil || code != 200 {
		return 0, false, fmt.Errorf("/metrics: %d %v", code, err)
	}
	for _, line := range strings.Split(body, "\n") {
		if strings.HasPrefix(line, "# TYPE "+name+" ") {
			// Registered. toposched prints no sample for an unlabelled metric never set
			// (client_golang would print 0); that reads as 0 here.
			found = true
		}
		if strings.HasPrefix(line, "#") || !strings.HasPrefix(line, name) {
			continue
		}
		rest := line[len(name):]
		if rest != "" && rest[0] != '{' && rest[0] != ' ' {
			continue // another metric with this prefix
		}
		f := strings.Fields(line)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err != nil {
			return 0, false, fmt.Errorf("%s: %q", name, line)
		}
		sum += v
		found = true
	}
	return sum, found, nil
}

// assertReplicaState: after everything, both live replicas (the new leader, and the old one
// restarted, which rebuilt every allocation from the pods' annotations) hold no allocation they
// could not read back or that collides with another, had no restore errors, and exactly one
// says it leads.
func (c *cluster) assertReplicaState(leader string) {
	t := c.t
	for name, r := range c.replicas {
		if ok, _ := r.proc.Exited(); ok {
			continue
		}
		if code, body, err := c.replicaGet(r.port, "/metrics"); err == nil && code == 200 {
			_ = os.WriteFile(filepath.Join(c.out, name+".metrics"), []byte(body), 0o644)
		}
		for _, m := range []string{"toposched_kube_held_allocations", "toposched_kube_held_nodes", "toposched_kube_restore_errors_total"} {
			v, found, err := c.metricSum(r.port, m)
			if err != nil || !found {
				t.Errorf("%s: metric %s: found=%v %v", name, m, found, err)
				continue
			}
			if v != 0 {
				t.Errorf("%s: %s = %v, want 0 (see its log: %s)", name, m, v, r.proc.LogPath)
			}
		}
		v, found, err := c.metricSum(r.port, "toposched_kube_leader")
		want := 0.0
		if name == leader {
			want = 1
		}
		if err != nil || !found || v != want {
			t.Errorf("%s: toposched_kube_leader = %v (found %v, %v), want %v", name, v, found, err, want)
		}
	}
}
