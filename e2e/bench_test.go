package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/yaml"

	"toposched.io/e2e/harness"
)

// TestBenchKubeScheduler measures (issue 14, item 4) the real kube-scheduler over kwok nodes
// with the chart's secondary-scheduler configuration and with the same configuration without
// its extenders block, at kube-scheduler's default percentageOfNodesToScore and at 100:
//
//   - pods scheduled per second: N pods (1 nvidia.com/gpu each) are created while no scheduler
//     serves their schedulerName; kube-scheduler is then started, and the rate is
//     (N-1) / (last bind - first bind), binds seen on a watch (scheduler start-up and informer
//     sync are not counted);
//   - bind-to-Running latency per pod (kwok marks pods Running): watch event of spec.nodeName
//     set -> watch event of phase Running, median and p99 per run;
//   - the extender's time from its own start to /readyz 200, with the run's pods bound.
//
// Every figure is the median over TOPOSCHED_E2E_BENCH_RUNS runs (rounds interleave the four
// configurations). Not part of the normal suite: set TOPOSCHED_E2E_BENCH=1.
func TestBenchKubeScheduler(t *testing.T) {
	if os.Getenv("TOPOSCHED_E2E_BENCH") != "1" {
		t.Skip("benchmark: run it with TOPOSCHED_E2E_BENCH=1 e2e/run.sh -run BenchKubeScheduler -v " +
			"(TOPOSCHED_E2E_BENCH_NODES=500,1000 TOPOSCHED_E2E_BENCH_PODS=1000 TOPOSCHED_E2E_BENCH_RUNS=3; TOPOSCHED_E2E_TIMEOUT=60m; " +
			"TOPOSCHED_E2E_BENCH_SET=extender.podEvents=warnings for more chart values)")
	}
	nodeCounts := benchEnvInts(t, "TOPOSCHED_E2E_BENCH_NODES", []int{500})
	pods := benchEnvInts(t, "TOPOSCHED_E2E_BENCH_PODS", []int{1000})[0]
	runs := benchEnvInts(t, "TOPOSCHED_E2E_BENCH_RUNS", []int{3})[0]

	var table strings.Builder
	fmt.Fprintf(&table, "%d pods (1 nvidia.com/gpu each) per run, %d runs per row; medians over the runs (min-max in brackets)\n\n", pods, runs)
	table.WriteString("| nodes | configuration | percentageOfNodesToScore | pods/s | bind->Running p50 (ms) | bind->Running p99 (ms) |\n")
	table.WriteString("| ---: | --- | --- | ---: | ---: | ---: |\n")
	var verbs strings.Builder
	verbs.WriteString("| nodes | extender's own mean time per call, all extender runs (toposched_request_duration_seconds sum/count) |\n| ---: | --- |\n")
	var ready strings.Builder
	ready.WriteString("| nodes | bound pods | extender start -> /readyz 200 (s), median | min-max |\n| ---: | ---: | ---: | --- |\n")
	for _, n := range nodeCounts {
		t.Run(fmt.Sprintf("nodes=%d", n), func(t *testing.T) {
			b := newBench(t, n, pods)
			results := map[string][]benchResult{}
			for round := 0; round < runs; round++ {
				for _, v := range benchVariants {
					r := b.run(v, round)
					t.Logf("nodes=%d %s pct=%s round %d: %.1f pods/s, bind->Running p50 %.0f ms p99 %.0f ms",
						n, v.name, v.pctName(), round, r.podsPerSec, r.p50*1000, r.p99*1000)
					results[v.key] = append(results[v.key], r)
					// The last configuration of the last round is the chart's: its pods stay
					// bound for the extender restarts below.
					if !(round == runs-1 && v.key == benchVariants[len(benchVariants)-1].key) {
						b.deletePods()
					}
				}
			}
			for _, v := range benchVariants {
				var rate, p50, p99 []float64
				for _, r := range results[v.key] {
					rate = append(rate, r.podsPerSec)
					p50 = append(p50, r.p50*1000)
					p99 = append(p99, r.p99*1000)
				}
				fmt.Fprintf(&table, "| %d | %s | %s | %s | %s | %s |\n", n, v.name, v.pctName(),
					medRange(rate, "%.1f"), medRange(p50, "%.0f"), medRange(p99, "%.0f"))
			}
			fmt.Fprintf(&verbs, "| %d | %s |\n", n, b.verbMeans())
			restarts := b.restartExtender(runs)
			fmt.Fprintf(&ready, "| %d | %d | %.2f | %.2f-%.2f |\n", n, pods,
				harness.Median(restarts), harness.Quantile(restarts, 0), harness.Quantile(restarts, 1))
		})
	}
	text := table.String() + "\n" + verbs.String() + "\n" + ready.String()
	t.Logf("results:\n%s", text)
	_ = os.WriteFile(filepath.Join(harness.E2EDir(), "_output", "BenchKubeScheduler-results.md"), []byte(text), 0o644)
}

type benchVariant struct {
	key, name string
	extender  bool
	noop      bool // the chart's extender entries pointed at noopExtender instead of toposched
	pct       int  // 0: the field is removed (kube-scheduler's adaptive default)
}

func (v benchVariant) pctName() string {
	if v.pct == 0 {
		return "default (adaptive)"
	}
	return strconv.Itoa(v.pct)
}

// The chart's configuration (extender, 100) comes last in each round (see above).
var benchVariants = []benchVariant{
	{key: "plain-default", name: "kube-scheduler only", pct: 0},
	{key: "plain-100", name: "kube-scheduler only", pct: 100},
	// The ceiling for any extender on this machine: the chart's configuration, its calls
	// answered by noopExtender (every node passes, no scores, the bind one Binding).
	{key: "noop-default", name: "with a no-op extender", extender: true, noop: true, pct: 0},
	{key: "noop-100", name: "with a no-op extender", extender: true, noop: true, pct: 100},
	{key: "ext-default", name: "with toposched extender", extender: true, pct: 0},
	{key: "ext-100", name: "with toposched extender (chart)", extender: true, pct: 100},
}

type benchResult struct {
	podsPerSec, p50, p99 float64 // p50/p99 of bind->Running in seconds
}

type bench struct {
	t       *testing.T
	c       *cluster
	pods    int
	replica string
	r       *replica
	schedKC string
	chart   map[string]any // the chart's KubeSchedulerConfiguration
	status  map[string]any // the NodeTopology status of every GPU node
	names   []string       // the GPU nodes
	beat    time.Time      // the last heartbeat written
	noop    int            // noopExtender's port, 0 until started
}

// heartbeat rewrites every NodeTopology's heartbeatTime (the agent's job) when the last one is
// over 5 minutes old (the chart's stale age is 15 minutes); only between runs.
func (b *bench) heartbeat() {
	if time.Since(b.beat) < 5*time.Minute {
		return
	}
	ctx := context.Background()
	start := time.Now()
	b.status["heartbeatTime"] = time.Now().UTC().Format(time.RFC3339)
	parallel(b.t, len(b.names), func(i int) error {
		u, err := b.c.dyn.Client.Resource(ntopoGVR).Get(ctx, b.names[i], metav1.GetOptions{})
		if err != nil {
			return err
		}
		u.Object["status"] = b.status
		_, err = b.c.dyn.Client.Resource(ntopoGVR).UpdateStatus(ctx, u, metav1.UpdateOptions{})
		return err
	})
	b.beat = start
	time.Sleep(2 * time.Second)
}

const benchTopology = "azure__nd-a100-v4_8xA100_8xCX6.nccl.xml"

// newBench: the chart installed by helm, n kwok GPU nodes (8 GPUs, 8 RDMA NICs each, the
// Azure ND A100 v4 export) plus system-0, their NodeTopology objects written as the agent
// writes them (object, then status subresource) by the test itself (n agent processes would
// not fit on the machine), and one extender replica with the chart's args, talked to directly.
func newBench(t *testing.T, n, pods int) *bench {
	// Plain HTTP, as the published figures were measured (docs/benchmarks.md): the scheduler
	// calls the replica directly (no Service stand-in in the path).
	args := []string{"--set", "extender.tls.enabled=false"}
	// TOPOSCHED_E2E_BENCH_SET: more chart values for the extender runs (helm --set syntax,
	// e.g. extender.podEvents=warnings), to measure what a setting costs.
	if extra := os.Getenv("TOPOSCHED_E2E_BENCH_SET"); extra != "" {
		args = append(args, "--set", extra)
	}
	c := newCluster(t, fmt.Sprintf("BenchKubeScheduler-%d", n), args...)
	b := newBenchOn(t, c, n, pods)
	b.schedKC = c.cp.ServiceAccountKubeconfig(t, c.out, c.ns, c.schedSA)
	for _, cm := range c.cms {
		if v, ok := cm.Data["scheduler-config.yaml"]; ok {
			if err := yaml.Unmarshal([]byte(v), &b.chart); err != nil {
				t.Fatal(err)
			}
		}
	}
	if b.chart == nil {
		t.Fatal("the chart installed no scheduler-config.yaml")
	}
	return b
}

// newBenchOn: on the installed chart c, n kwok GPU nodes with their NodeTopology objects and
// one extender replica that leads (the part every scheduler's benchmark shares).
func newBenchOn(t *testing.T, c *cluster, n, pods int) *bench {
	b := &bench{t: t, c: c, pods: pods}
	ctx := context.Background()
	file := filepath.Join(harness.TopologiesDir(t), benchTopology)
	out, err := harness.Run(ctx, time.Minute, nil, c.peers.Toposched, "topo", "--input", file, "--format", "json")
	if err != nil {
		t.Fatalf("toposched topo: %v\n%s", err, out)
	}
	var doc topoDoc
	var obj map[string]any
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(out), &obj); err != nil {
		t.Fatal(err)
	}
	proto := &gpuNode{Topo: doc}
	gpus, nics := len(doc.Status.GPUs), proto.rdmaNICs()

	start := time.Now()
	names := []string{"system-0"}
	for i := 0; i < n; i++ {
		names = append(names, fmt.Sprintf("gpu-%05d", i))
	}
	parallel(t, len(names), func(i int) error {
		name := names[i]
		capacity := corev1.ResourceList{
			corev1.ResourceCPU:    resource.MustParse("128"),
			corev1.ResourceMemory: resource.MustParse("1Ti"),
			corev1.ResourcePods:   resource.MustParse("110"),
		}
		labels := map[string]string{"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "type": "kwok"}
		if i > 0 {
			capacity["nvidia.com/gpu"] = *resource.NewQuantity(int64(gpus), resource.DecimalSI)
			capacity["rdma/ib"] = *resource.NewQuantity(int64(nics), resource.DecimalSI)
			labels["nvidia.com/gpu.present"] = "true"
			labels["toposched.io/leaf"] = fmt.Sprintf("leaf-%d", i/32)
			labels["toposched.io/spine"] = fmt.Sprintf("spine-%d", i/512)
		}
		node := &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels,
				Annotations: map[string]string{"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"}},
			// A /24 per node: without one kwok hands out pod IPs from one shared 10.0.0.1/24
			// pool, and at hundreds of pods its pod-ready patch was refused ("status.podIPs:
			// may specify no more than one IP for each IP family"), leaving pods Pending.
			Spec:   corev1.NodeSpec{PodCIDR: fmt.Sprintf("10.%d.%d.0/24", 64+i/256, i%256)},
			Status: corev1.NodeStatus{Capacity: capacity, Allocatable: capacity},
		}
		node.Spec.PodCIDRs = []string{node.Spec.PodCIDR}
		_, err := c.cp.Admin.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
		return err
	})
	harness.Start(t, c.out, "kwok", nil, c.peers.Kwok, "--kubeconfig", c.cp.AdminKubeconfig,
		"--manage-nodes-with-annotation-selector", "kwok.x-k8s.io/node=fake",
		"--config", strings.Join(c.peers.KwokStages, ","), "--node-lease-duration-seconds", "40")
	err = harness.Eventually(5*time.Minute, time.Second, func() (bool, error) {
		list, err := c.cp.Admin.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		ready := 0
		for _, nd := range list.Items {
			for _, cond := range nd.Status.Conditions {
				if cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue {
					ready++
				}
			}
		}
		return ready == len(names), fmt.Errorf("%d of %d nodes Ready", ready, len(names))
	})
	if err != nil {
		t.Fatalf("kwok: %v\n%s", err, harness.TailFile(filepath.Join(c.out, "kwok.log"), 3000))
	}
	// Lift the not-ready taint (the node lifecycle controller's job; no controller-manager runs).
	parallel(t, len(names), func(i int) error {
		nd, err := c.cp.Admin.CoreV1().Nodes().Get(ctx, names[i], metav1.GetOptions{})
		if err != nil {
			return err
		}
		var keep []corev1.Taint
		for _, taint := range nd.Spec.Taints {
			if taint.Key != corev1.TaintNodeNotReady {
				keep = append(keep, taint)
			}
		}
		if len(keep) == len(nd.Spec.Taints) {
			return nil
		}
		nd.Spec.Taints = keep
		_, err = c.cp.Admin.CoreV1().Nodes().Update(ctx, nd, metav1.UpdateOptions{})
		return err
	})
	// NodeTopology per GPU node, with the status fields the agent adds to `toposched topo`'s
	// (src/kube/objects.cc): summary, generation, heartbeatTime (the extender treats a node
	// without a recent heartbeat as stale and sends it no GPU pods).
	status, _ := obj["status"].(map[string]any)
	status["summary"] = map[string]any{"gpus": gpus, "nics": len(doc.Status.NICs), "rdmaNics": nics,
		"numaNodes": len(status["numaNodes"].([]any)), "gpuModel": ""}
	if g0, ok := status["gpus"].([]any)[0].(map[string]any); ok {
		if m, ok := g0["model"].(string); ok {
			status["summary"].(map[string]any)["gpuModel"] = m
		}
	}
	status["generation"] = 1
	status["heartbeatTime"] = time.Now().UTC().Format(time.RFC3339)
	b.status, b.names = status, names[1:]
	b.beat = time.Now()
	parallel(t, n, func(i int) error {
		name := names[i+1]
		u := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": obj["apiVersion"], "kind": obj["kind"],
			"metadata": map[string]any{"name": name},
		}}
		created, err := c.dyn.Client.Resource(ntopoGVR).Create(ctx, u, metav1.CreateOptions{})
		if err != nil {
			return err
		}
		created.Object["status"] = status
		_, err = c.dyn.Client.Resource(ntopoGVR).UpdateStatus(ctx, created, metav1.UpdateOptions{})
		return err
	})
	t.Logf("%d kwok GPU nodes Ready, untainted, with NodeTopology in %s", n, time.Since(start).Round(time.Millisecond))

	c.cp.EnsureNamespace(t, workloadNS)
	b.replica = c.extDep.Name + "-bench"
	c.extenderPod(b.replica)
	start = time.Now()
	b.r = c.startReplica(b.replica)
	c.waitReady(b.r, 3*time.Minute)
	t.Logf("extender ready in %s (first start, %d nodes)", time.Since(start).Round(time.Millisecond), n)
	b.waitLeader()
	return b
}

// waitLeader waits (bounded) until the replica's pod carries the leader label: only the leader binds.
func (b *bench) waitLeader() {
	err := harness.Eventually(90*time.Second, 250*time.Millisecond, func() (bool, error) {
		p, err := b.c.cp.Admin.CoreV1().Pods(b.c.ns).Get(context.Background(), b.replica, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return p.Labels["toposched.io/leader"] == "true", fmt.Errorf("labels %v", p.Labels)
	})
	if err != nil {
		b.t.Fatalf("extender never led: %v\n%s", err, b.r.proc.Tail(3000))
	}
}

// schedulerConfig is the chart's KubeSchedulerConfiguration for variant v: urlPrefix pointed
// straight at the replica (no Service stand-in in the path), the scheduler ServiceAccount's
// kubeconfig with qps/burst 5000 (kube-scheduler's 50/100 default would cap the default
// binder at about 50 binds/s; scheduler_perf runs with 5000 too), leader election off (one
// scheduler), and for the plain variants the extenders block removed.
func (b *bench) schedulerConfig(v benchVariant) string {
	raw, _ := json.Marshal(b.chart)
	var cfg map[string]any
	_ = json.Unmarshal(raw, &cfg)
	if v.extender {
		exts, _ := cfg["extenders"].([]any)
		if len(exts) == 0 {
			b.t.Fatal("no extender in the chart's config")
		}
		port := b.r.port
		if v.noop {
			port = b.noopPort()
		}
		for _, e := range exts {
			ext := e.(map[string]any)
			ext["urlPrefix"] = fmt.Sprintf("http://127.0.0.1:%d%s", port, urlPath(b.t, ext))
		}
	} else {
		delete(cfg, "extenders")
	}
	if v.pct == 0 {
		delete(cfg, "percentageOfNodesToScore")
	} else {
		cfg["percentageOfNodesToScore"] = v.pct
	}
	cfg["clientConnection"] = map[string]any{"kubeconfig": b.schedKC, "qps": 5000, "burst": 5000}
	cfg["leaderElection"] = map[string]any{"leaderElect": false}
	out, err := yaml.Marshal(cfg)
	if err != nil {
		b.t.Fatal(err)
	}
	path := filepath.Join(b.c.out, "scheduler-config-"+v.key+".yaml")
	if err := os.WriteFile(path, out, 0o644); err != nil {
		b.t.Fatal(err)
	}
	return path
}

// noopPort starts (once) an extender that does the least the protocol asks, in this process:
// filter passes every node it is given, prioritize scores none, bind makes the Binding. The
// runs against it measure what calling an extender costs kube-scheduler and the API server
// here, whatever the extender decides.
func (b *bench) noopPort() int {
	if b.noop != 0 {
		return b.noop
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.t.Fatal(err)
	}
	pods := b.c.cp.Admin.CoreV1().Pods(workloadNS)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch {
		case strings.HasSuffix(r.URL.Path, "/filter"):
			var args struct {
				NodeNames *[]string `json:"nodenames"`
			}
			_ = json.NewDecoder(r.Body).Decode(&args)
			_ = json.NewEncoder(w).Encode(map[string]any{"nodenames": args.NodeNames, "failedNodes": map[string]string{}, "error": ""})
		case strings.HasSuffix(r.URL.Path, "/bind"):
			var args struct {
				PodName, PodNamespace, PodUID, Node string
			}
			_ = json.NewDecoder(r.Body).Decode(&args)
			binding := &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Name: args.PodName, UID: types.UID(args.PodUID)},
				Target: corev1.ObjectReference{Kind: "Node", Name: args.Node}}
			msg := ""
			if err := pods.Bind(r.Context(), binding, metav1.CreateOptions{}); err != nil {
				msg = err.Error()
			}
			_ = json.NewEncoder(w).Encode(map[string]string{"error": msg})
		default: // prioritize, prioritize-cpu
			_, _ = io.Copy(io.Discard, r.Body)
			_, _ = w.Write([]byte("[]"))
		}
	})}
	go func() { _ = srv.Serve(ln) }()
	b.t.Cleanup(func() { _ = srv.Close() })
	b.noop = ln.Addr().(*net.TCPAddr).Port
	return b.noop
}

func (b *bench) schedulerName() string {
	profiles, _ := b.chart["profiles"].([]any)
	if len(profiles) == 0 {
		b.t.Fatal("the chart's scheduler config has no profiles")
	}
	name, _ := profiles[0].(map[string]any)["schedulerName"].(string)
	return name
}

// run creates the pods (pending: no scheduler serves them yet), starts kube-scheduler with
// variant v's configuration, waits (bounded) until every pod is Running, and stops it.
func (b *bench) run(v benchVariant, round int) benchResult {
	t, c := b.t, b.c
	if v.extender {
		b.heartbeat()
	}
	cfg := b.schedulerConfig(v)
	sched := b.schedulerName()
	names := make([]string, b.pods)
	for i := range names {
		names[i] = fmt.Sprintf("b%d-%s-%05d", round, v.key, i)
	}
	b.createPods(sched, names, nil)
	return b.measure(fmt.Sprintf("%s round %d", v.key, round), func() *harness.Proc {
		return harness.Start(t, c.out, fmt.Sprintf("kube-scheduler-%s-%d", v.key, round), nil, c.peers.Scheduler,
			"--config", cfg, "--bind-address", "127.0.0.1", "--secure-port", strconv.Itoa(harness.FreePort(t)), "--v", "1")
	})
}

// createPods creates the benchmark's pods (1 nvidia.com/gpu each) for scheduler sched;
// annotate, when set, adds annotations to pod i.
func (b *bench) createPods(sched string, names []string, annotate func(i int) map[string]string) {
	c := b.c
	parallel(b.t, len(names), func(i int) error {
		pod := c.podObject(sched, podSpec{name: names[i], gpus: 1})
		// kwok v0.8.0 gives a non-host-network pod an IP from a pool per render, and its
		// strategic-merge status patch appends to podIPs: at hundreds of pods some patches
		// carried two IPv4 addresses and were refused ("may specify no more than one IP for
		// each IP family"), leaving those pods never Running. A host-network pod gets the
		// node's IP, the same on every render. No scheduling plugin here looks at it (no ports).
		pod.Spec.HostNetwork = true
		if annotate != nil {
			for k, v := range annotate(i) {
				pod.Annotations[k] = v
			}
		}
		_, err := c.cp.Admin.CoreV1().Pods(workloadNS).Create(context.Background(), pod, metav1.CreateOptions{})
		return err
	})
}

// measure starts a scheduler (start) over the pending pods, waits (bounded) until every pod is
// Running, stops it, and returns the rate and the bind->Running latencies.
func (b *bench) measure(label string, start func() *harness.Proc) benchResult {
	t, c := b.t, b.c
	ctx := context.Background()
	list, err := c.cp.Admin.CoreV1().Pods(workloadNS).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	bound, running := map[string]time.Time{}, map[string]time.Time{}
	done := make(chan struct{})
	closed := false
	see := func(pod *corev1.Pod, now time.Time) {
		mu.Lock()
		defer mu.Unlock()
		if _, seen := bound[pod.Name]; !seen && pod.Spec.NodeName != "" {
			bound[pod.Name] = now
		}
		if _, seen := running[pod.Name]; !seen && pod.Status.Phase == corev1.PodRunning {
			running[pod.Name] = now
		}
		if len(running) == b.pods && !closed {
			closed = true
			close(done)
		}
	}
	// The API server closes a watcher that falls behind ("Forcing pods watcher close due to
	// unresponsiveness", seen here on 2 busy cores): watch again from the last resourceVersion
	// seen (a relist when that is gone; its pods are stamped when listed).
	wctx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	podsAPI := c.cp.Admin.CoreV1().Pods(workloadNS)
	go func() {
		rv := list.ResourceVersion
		for wctx.Err() == nil {
			w, err := podsAPI.Watch(wctx, metav1.ListOptions{ResourceVersion: rv, AllowWatchBookmarks: true})
			if err != nil {
				time.Sleep(200 * time.Millisecond)
				continue
			}
			for ev := range w.ResultChan() {
				now := time.Now()
				if ev.Type == watch.Error {
					rv = "" // e.g. 410 Gone: relist below
					break
				}
				pod, ok := ev.Object.(*corev1.Pod)
				if !ok {
					continue
				}
				rv = pod.ResourceVersion
				if ev.Type == watch.Added || ev.Type == watch.Modified {
					see(pod, now)
				}
			}
			w.Stop()
			if rv == "" && wctx.Err() == nil {
				l, err := podsAPI.List(wctx, metav1.ListOptions{})
				if err != nil {
					time.Sleep(200 * time.Millisecond)
					continue
				}
				now := time.Now()
				for i := range l.Items {
					see(&l.Items[i], now)
				}
				rv = l.ResourceVersion
			}
		}
	}()
	proc := start()
	tick := time.NewTicker(30 * time.Second)
	defer tick.Stop()
	deadline := time.After(10 * time.Minute)
wait:
	for {
		select {
		case <-done:
			break wait
		case <-proc.Done():
			t.Fatalf("%s: the scheduler exited:\n%s", label, proc.Tail(4000))
		case <-tick.C:
			mu.Lock()
			t.Logf("%s: %d of %d bound, %d Running", label, len(bound), b.pods, len(running))
			mu.Unlock()
			continue
		case <-deadline:
		}
		mu.Lock()
		nb, nr := len(bound), len(running)
		mu.Unlock()
		t.Fatalf("%s: after 10 min %d of %d pods bound, %d Running (watch may have closed)\n--- the scheduler:\n%s",
			label, nb, b.pods, nr, proc.Tail(3000))
	}
	proc.Stop(10 * time.Second)
	mu.Lock()
	defer mu.Unlock()
	var first, last time.Time
	var lat []float64
	for name, bt := range bound {
		if first.IsZero() || bt.Before(first) {
			first = bt
		}
		if bt.After(last) {
			last = bt
		}
		if rt, ok := running[name]; ok {
			lat = append(lat, rt.Sub(bt).Seconds())
		}
	}
	r := benchResult{p50: harness.Quantile(lat, 0.5), p99: harness.Quantile(lat, 0.99)}
	if span := last.Sub(first).Seconds(); span > 0 {
		r.podsPerSec = float64(len(bound)-1) / span
	}
	return r
}

// deletePods force-deletes the workload pods (no kubelet needs to agree: kwok's nodes) and
// waits (bounded) until they are gone, then gives the extender's informer a moment to release
// their devices.
func (b *bench) deletePods() {
	ctx := context.Background()
	zero := int64(0)
	pods := b.c.cp.Admin.CoreV1().Pods(workloadNS)
	if err := pods.DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: &zero}, metav1.ListOptions{}); err != nil {
		b.t.Fatal(err)
	}
	err := harness.Eventually(3*time.Minute, 500*time.Millisecond, func() (bool, error) {
		l, err := pods.List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		return len(l.Items) == 0, fmt.Errorf("%d pods left", len(l.Items))
	})
	if err != nil {
		b.t.Fatal(err)
	}
	time.Sleep(2 * time.Second)
}

// restartExtender stops the replica (SIGTERM) and starts it again n times, each time measuring
// from the process start to the first /readyz 200 (polled every 10 ms once the port file
// exists; startReplica polls that file every 200 ms, so a figure may be up to 0.2 s late).
func (b *bench) restartExtender(n int) []float64 {
	var out []float64
	for i := 0; i < n; i++ {
		b.r.proc.Stop(30 * time.Second)
		start := time.Now()
		b.r = b.c.startReplica(b.replica)
		err := harness.Eventually(3*time.Minute, 10*time.Millisecond, func() (bool, error) {
			if ok, err := b.r.proc.Exited(); ok {
				return false, harness.Permanent(fmt.Errorf("exited: %v", err))
			}
			code, _, err := b.c.replicaGet(b.r.port, "/readyz")
			return err == nil && code == 200, err
		})
		if err != nil {
			b.t.Fatalf("extender restart %d: %v\n%s", i, err, b.r.proc.Tail(3000))
		}
		d := time.Since(start)
		b.t.Logf("extender restart %d: /readyz 200 after %s", i, d.Round(time.Millisecond))
		out = append(out, d.Seconds())
	}
	return out
}

// verbMeans scrapes the replica's /metrics: the mean time per filter, prioritize and bind call
// (server side, from request read to answer written) and the number of calls.
func (b *bench) verbMeans(verbs ...string) string {
	if len(verbs) == 0 {
		verbs = []string{"filter", "prioritize", "bind"}
	}
	code, body, err := b.c.replicaGet(b.r.port, "/metrics")
	if err != nil || code != 200 {
		return fmt.Sprintf("/metrics: %d %v", code, err)
	}
	sum, count := map[string]float64{}, map[string]float64{}
	for _, line := range strings.Split(body, "\n") {
		for _, verb := range verbs {
			for _, k := range []string{"sum", "count"} {
				prefix := "toposched_request_duration_seconds_" + k + `{verb="` + verb + `"} `
				if strings.HasPrefix(line, prefix) {
					v, _ := strconv.ParseFloat(strings.TrimSpace(strings.TrimPrefix(line, prefix)), 64)
					if k == "sum" {
						sum[verb] = v
					} else {
						count[verb] = v
					}
				}
			}
		}
	}
	var parts []string
	for _, verb := range verbs {
		if count[verb] > 0 {
			parts = append(parts, fmt.Sprintf("%s %.2f ms (%.0f calls)", verb, 1000*sum[verb]/count[verb], count[verb]))
		}
	}
	return strings.Join(parts, ", ")
}

// parallel runs f(0..n-1) on 16 goroutines and fails the test on the first error.
func parallel(t *testing.T, n int, f func(i int) error) {
	t.Helper()
	var wg sync.WaitGroup
	var once sync.Once
	var first error
	next := make(chan int)
	for w := 0; w < 16; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				if err := f(i); err != nil {
					once.Do(func() { first = err })
				}
			}
		}()
	}
	for i := 0; i < n; i++ {
		next <- i
	}
	close(next)
	wg.Wait()
	if first != nil {
		t.Fatal(first)
	}
}

func medRange(xs []float64, format string) string {
	return fmt.Sprintf(format+" ("+format+"-"+format+")", harness.Median(xs), harness.Quantile(xs, 0), harness.Quantile(xs, 1))
}

func benchEnvInts(t *testing.T, name string, def []int) []int {
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	var out []int
	for _, f := range strings.Split(s, ",") {
		v, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || v <= 0 {
			t.Fatalf("%s=%q: want positive integers, comma-separated", name, s)
		}
		out = append(out, v)
	}
	return out
}
