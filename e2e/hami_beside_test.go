package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"math/rand"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"toposched.io/e2e/harness"
)

// The deployment HAMi users run with toposched: HAMi's own scheduler (its extender, cmd/scheduler,
// beside a kube-scheduler with the configuration HAMi's chart renders) places the small models
// on GPU shares, toposched's kube-scheduler places the whole-GPU pods, on the same nodes, both
// registered and served by HAMi's device plugin. HAMi v2.10.0 is installed by the real helm from
// its own chart (charts/hami: ServiceAccounts, RBAC, ConfigMaps; the binaries run as processes,
// as the other peers do), with its admission webhook off (nothing here routes a Service to a
// webhook server: pods name their scheduler themselves).

const hamiNS = "hami-system"

// hamiSched is HAMi's scheduler: its extender and its kube-scheduler.
type hamiSched struct {
	c             *cluster
	ext, kube     *harness.Proc
	port          int
	metricsPort   int
	extArgs       []string
	extEnv        []string
	schedulerName string
	bin           string
}

// startHAMiScheduler installs HAMi's chart and starts its extender (with the chart's arguments
// and the chart's device configuration, under the chart's ServiceAccount) and its kube-scheduler
// (the chart's KubeSchedulerConfiguration, the extender's address pointed at the process).
func (c *cluster) startHAMiScheduler() *hamiSched {
	t := c.t
	hamiPeerPath(t) // skipped without HAMi's tree
	src := filepath.Join(sharedPeersDir(), "hami-"+hamiTag)
	h := &hamiSched{c: c, bin: filepath.Join(harness.CacheDir(), "hami-"+hamiTag, "hami-scheduler")}
	if _, err := os.Stat(h.bin); err != nil {
		t.Fatalf("hami-scheduler is not built in %s: run e2e/build-peers.sh hami", filepath.Dir(h.bin))
	}
	ctx := context.Background()
	helm := harness.NewHelm(t, c.peers.Helm, c.cp.AdminKubeconfig)
	if _, err := helm.Run(ctx, 3*time.Minute, "install", "hami", filepath.Join(src, "charts", "hami"), "--namespace", hamiNS,
		"--create-namespace", "--timeout", "2m", "--set", "scheduler.admissionWebhook.enabled=false"); err != nil {
		t.Fatalf("helm install HAMi's chart: %v", err)
	}
	cm := func(name, key string) string {
		obj, err := c.cp.Admin.CoreV1().ConfigMaps(hamiNS).Get(ctx, name, metav1.GetOptions{})
		if err != nil || obj.Data[key] == "" {
			t.Fatalf("HAMi's chart installed no ConfigMap %s with %s: %v", name, key, err)
		}
		return obj.Data[key]
	}
	dep, err := c.cp.Admin.AppsV1().Deployments(hamiNS).Get(ctx, "hami-scheduler", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("HAMi's chart installed no hami-scheduler Deployment: %v", err)
	}
	kc := c.cp.ServiceAccountKubeconfig(t, c.out, hamiNS, dep.Spec.Template.Spec.ServiceAccountName)
	h.port = harness.FreePort(t)

	// The extender: the chart's command, its listen addresses and the device configuration's
	// path made local.
	deviceConfig := filepath.Join(c.out, "hami-device-config.yaml")
	if err := os.WriteFile(deviceConfig, []byte(cm("hami-scheduler-device", "device-config.yaml")), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, ct := range dep.Spec.Template.Spec.Containers {
		if ct.Name != "vgpu-scheduler-extender" {
			continue
		}
		for _, a := range ct.Command[1:] {
			switch {
			case strings.HasPrefix(a, "--http_bind="):
				a = "--http_bind=127.0.0.1:" + strconv.Itoa(h.port)
			case strings.HasPrefix(a, "--metrics-bind-address="):
				h.metricsPort = harness.FreePort(t)
				a = "--metrics-bind-address=127.0.0.1:" + strconv.Itoa(h.metricsPort)
			case strings.HasPrefix(a, "--device-config-file="):
				a = "--device-config-file=" + deviceConfig
			}
			h.extArgs = append(h.extArgs, a)
		}
		h.extEnv = []string{"KUBECONFIG=" + kc, "POD_NAME=hami-scheduler-e2e", "POD_NAMESPACE=" + hamiNS}
		for _, e := range ct.Env {
			if e.Value != "" {
				h.extEnv = append(h.extEnv, e.Name+"="+e.Value)
			}
		}
	}
	if h.extArgs == nil {
		t.Fatal("HAMi's hami-scheduler Deployment has no vgpu-scheduler-extender container")
	}
	h.startExtender()

	// Its kube-scheduler: the chart's configuration, one line changed (the extender's address).
	var cfg map[string]any
	if err := yaml.Unmarshal([]byte(cm("hami-scheduler", "config.yaml")), &cfg); err != nil {
		t.Fatalf("HAMi's config.yaml: %v", err)
	}
	exts, _ := cfg["extenders"].([]any)
	if len(exts) != 1 {
		t.Fatalf("HAMi's config.yaml: want one extender, got %d", len(exts))
	}
	exts[0].(map[string]any)["urlPrefix"] = "http://127.0.0.1:" + strconv.Itoa(h.port)
	cfg["clientConnection"] = map[string]any{"kubeconfig": kc}
	profiles, _ := cfg["profiles"].([]any)
	if len(profiles) != 1 {
		t.Fatalf("HAMi's config.yaml: want one profile, got %d", len(profiles))
	}
	h.schedulerName, _ = profiles[0].(map[string]any)["schedulerName"].(string)
	b, err := yaml.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(c.out, "hami-scheduler-config.yaml")
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	h.kube = harness.Start(c.root, c.out, "hami-kube-scheduler", nil, c.peers.Scheduler,
		"--config", path, "--bind-address", "127.0.0.1", "--secure-port", strconv.Itoa(harness.FreePort(t)), "--v", "2")
	return h
}

func (h *hamiSched) startExtender() {
	t := h.c.t
	h.ext = harness.Start(h.c.root, h.c.out, "hami-scheduler", h.extEnv, h.bin, h.extArgs...)
	url := "http://127.0.0.1:" + strconv.Itoa(h.port) + "/healthz"
	if err := harness.Eventually(60*time.Second, 250*time.Millisecond, func() (bool, error) {
		resp, err := http.Get(url)
		if err != nil {
			return false, err
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, fmt.Errorf("%s: %s", url, resp.Status)
	}); err != nil {
		t.Fatalf("HAMi's scheduler did not come up: %v\n%s", err, harness.TailFile(h.ext.LogPath, 3000))
	}
}

// restartExtender kills HAMi's extender with SIGKILL and starts it again.
func (h *hamiSched) restartExtender() {
	h.ext.Kill9()
	<-h.ext.Done()
	h.startExtender()
}

// cardUse is what HAMi's decoder says the pods hold of one card.
type cardUse struct {
	pods              []string
	mem, cores, count int32
	whole             bool // one pod holds the whole card
}

// assertNoOvercommit reads every bound pod's HAMi record with HAMi's decoder (what HAMi's
// scheduler counts a pod as holding) and sums it per card: memory and cores within what HAMi's
// registration gives the card, at most its split count of pods, and a card with a pod holding
// all its cores (a whole GPU: toposched's, or HAMi's exclusive request) held by that pod alone.
func (c *cluster) assertNoOvercommit(t *testing.T, registered map[string]map[string]int32) map[string]*cardUse {
	ctx := context.Background()
	pods, err := c.cp.Admin.CoreV1().Pods(workloadNS).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	use := map[string]*cardUse{}
	whole := map[string]bool{}
	for i := range pods.Items {
		p := &pods.Items[i]
		if p.Spec.NodeName == "" {
			continue
		}
		d := hamiDecodePod(t, p)
		if d.AllocatedError != "" {
			t.Errorf("%s: HAMi cannot decode what it holds: %s", p.Name, d.AllocatedError)
			continue
		}
		held := 0
		for _, ctr := range d.Allocated["NVIDIA"] {
			for _, dev := range ctr {
				key := p.Spec.NodeName + "/" + dev.UUID
				u := use[key]
				if u == nil {
					u = &cardUse{}
					use[key] = u
				}
				u.pods = append(u.pods, fmt.Sprintf("%s(%dMiB,%d%%)", p.Name, dev.Usedmem, dev.Usedcores))
				u.mem += dev.Usedmem
				u.cores += dev.Usedcores
				u.count++
				held++
				if dev.Usedcores == 100 && dev.Usedmem == registered[p.Spec.NodeName][dev.UUID] {
					whole[key] = true
				}
			}
		}
		if held == 0 {
			t.Errorf("%s on %s holds no GPU by HAMi's reading: neither scheduler recorded its devices", p.Name, p.Spec.NodeName)
		}
	}
	keys := make([]string, 0, len(use))
	for k := range use {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		u := use[k]
		node, uuid, _ := strings.Cut(k, "/")
		total, ok := registered[node][uuid]
		if !ok {
			t.Errorf("%s: held by %v, but HAMi's registration of %s has no such card", uuid, u.pods, node)
			continue
		}
		if u.mem > total || u.cores > 100 || u.count > 10 {
			t.Errorf("card %s overcommitted: %d of %d MiB, %d%% of the cores, %d of 10 pods: %v", k, u.mem, total, u.cores, u.count, u.pods)
		}
		u.whole = whole[k]
	}
	return use
}

// assertViewsAgree: HAMi's scheduler (its metrics: pods and memory per card) and toposched's
// leader (/nodes: free and shared GPUs per node) see what HAMi's decoder reads from the pods.
func (c *cluster) assertViewsAgree(t *testing.T, hs *hamiSched, r *replica, use map[string]*cardUse, nodes []*gpuNode) {
	// HAMi's scheduler refreshes the usage its metrics report when it registers nodes: every
	// 15 s and on node events (pkg/scheduler/scheduler.go, RegisterFromNodeAnnotations). So its
	// view is awaited for two of those periods; the last mismatch is the error.
	var mismatches []string
	err := harness.Eventually(35*time.Second, time.Second, func() (bool, error) {
		mismatches = c.hamiMismatches(t, hs, use, nodes)
		return len(mismatches) == 0, fmt.Errorf("%d cards differ", len(mismatches))
	})
	if err != nil {
		for _, m := range mismatches {
			t.Error(m)
		}
	}
	code, body, err := c.replicaGet(r.port, "/nodes")
	if err != nil || code != http.StatusOK {
		t.Fatalf("toposched /nodes: %d %v", code, err)
	}
	var view struct {
		Nodes []struct {
			Name string `json:"name"`
			Gpus struct {
				Free   int `json:"free"`
				Shared int `json:"shared"`
			} `json:"gpus"`
		} `json:"nodes"`
	}
	if err := json.Unmarshal([]byte(body), &view); err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes {
		used, shared := 0, 0
		for uuid := range n.uuids() {
			if u := use[n.Name+"/"+uuid]; u != nil {
				used++
				if !u.whole {
					shared++
				}
			}
		}
		for _, v := range view.Nodes {
			if v.Name != n.Name {
				continue
			}
			if v.Gpus.Free != len(n.uuids())-used || v.Gpus.Shared != shared {
				t.Errorf("toposched sees %s with %d free and %d shared GPUs; the pods' records say %d free, %d shared",
					n.Name, v.Gpus.Free, v.Gpus.Shared, len(n.uuids())-used, shared)
			}
		}
	}
}

// hamiMismatches compares HAMi's scheduler's metrics (pods and memory per card) with `use`.
func (c *cluster) hamiMismatches(t *testing.T, hs *hamiSched, use map[string]*cardUse, nodes []*gpuNode) []string {
	resp, err := http.Get("http://127.0.0.1:" + strconv.Itoa(hs.metricsPort) + "/metrics")
	if err != nil {
		return []string{fmt.Sprintf("HAMi's scheduler metrics: %v", err)}
	}
	defer resp.Body.Close()
	hamiCount, hamiMem := map[string]float64{}, map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		for name, into := range map[string]map[string]float64{"hami_gpu_shared_count{": hamiCount, "hami_gpu_memory_allocated_bytes{": hamiMem} {
			if !strings.HasPrefix(line, name) {
				continue
			}
			labels, value, _ := strings.Cut(line[len(name):], "} ")
			v, _ := strconv.ParseFloat(value, 64)
			into[labelValue(labels, "node")+"/"+labelValue(labels, "device_uuid")] = v
		}
	}
	var out []string
	for _, n := range nodes {
		for uuid := range n.uuids() {
			key := n.Name + "/" + uuid
			var want cardUse
			if u := use[key]; u != nil {
				want = *u
			}
			if got := hamiCount[key]; int32(got) != want.count {
				out = append(out, fmt.Sprintf("HAMi's scheduler counts %v pods on %s, the pods' records say %d: %v", got, key, want.count, want.pods))
			}
			if got := hamiMem[key] / (1 << 20); int32(got) != want.mem {
				out = append(out, fmt.Sprintf("HAMi's scheduler counts %v MiB allocated on %s, the pods' records say %d: %v", got, key, want.mem, want.pods))
			}
		}
	}
	return out
}

// labelValue is label `name`'s value in a Prometheus label list (`a="x",b="y"`).
func labelValue(labels, name string) string {
	for _, kv := range strings.Split(labels, ",") {
		if k, v, ok := strings.Cut(kv, "="); ok && k == name {
			return strings.Trim(v, `"`)
		}
	}
	return ""
}

// uuids are the node's GPU UUIDs.
func (n *gpuNode) uuids() map[string]bool {
	out := map[string]bool{}
	for _, g := range n.Topo.Status.GPUs {
		out[g.UUID] = true
	}
	return out
}

// assertNoNodeLock: HAMi's node lock is on no node.
func (c *cluster) assertNoNodeLock(t *testing.T) {
	nodes, err := c.cp.Admin.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes.Items {
		if v, ok := n.Annotations["hami.io/mutex.lock"]; ok {
			t.Errorf("node %s: HAMi's node lock left held: %q", n.Name, v)
		}
	}
}

// TestHAMiBesideToposched: HAMi v2.10.0's scheduler and toposched on the same two DGX-2H nodes
// (16 V100 each, registered and served by HAMi's device plugin side). HAMi places vGPU pods
// (memory and cores), toposched whole-GPU pods and shares, created in a random order with
// deletions; then HAMi's extender and toposched's leader are each killed and restarted and
// more pods come. Every pod lands, no card is held beyond what HAMi's registration gives it
// (as HAMi counts: its decoder over every pod), no node lock is left, and every bind's HAMi
// record is what toposched's store holds and what HAMi's device plugin handed out.
func TestHAMiBesideToposched(t *testing.T) {
	hamiPeerPath(t)
	c := newCluster(t, "TestHAMiBesideToposched")
	var nodes []*gpuNode
	for _, n := range []string{"gpu-dgx2h-a", "gpu-dgx2h-b"} {
		// HAMi's device plugin advertises each card 10 times (its deviceSplitCount).
		nodes = append(nodes, &gpuNode{Name: n, File: "hwloc__nvidia-dgx2h_16xV100_12xNVSwitch.hwloc2.xml", GPUCapacity: 160,
			Labels: map[string]string{"toposched.io/leaf": "leaf-1", "toposched.io/spine": "spine-1"}})
	}
	c.addNodes(nodes)
	registered := map[string]map[string]int32{}
	for _, n := range nodes {
		for node, cards := range c.registerHAMi(n, 32768, "Tesla V100-SXM3-32GB-H") {
			registered[node] = cards
		}
	}
	plugin := startHAMiPlugin(c, nodes[0].Name, nodes[1].Name)
	r, toposchedName := c.startLeaderAndScheduler("-e2e-hami")
	hs := c.startHAMiScheduler()

	seed := time.Now().UnixNano()
	if s := os.Getenv("TOPOSCHED_E2E_SEED"); s != "" {
		seed, _ = strconv.ParseInt(s, 10, 64)
	}
	rng := rand.New(rand.NewSource(seed))
	t.Logf("seed %d (TOPOSCHED_E2E_SEED reruns this order)", seed)

	type job struct {
		spec      podSpec
		scheduler string
	}
	var topo, hami []podSpec
	n := 0
	mk := func(p podSpec, sched string, list *[]podSpec) job {
		n++
		p.name = fmt.Sprintf("%s-%d", p.name, n)
		p.fits = true
		*list = append(*list, p)
		return job{p, sched}
	}
	// Sized so that every pod fits whatever the order: a wave holds whole GPUs (an 8-GPU pod in
	// the first only) and four shares (HAMi spreads its vGPUs over distinct cards, so each may
	// take a card of its own). The first wave holds at most 19 of the 32 cards; the 8-GPU pod
	// and half of the rest go; the second wave adds at most 11, so at least 10 cards stay free,
	// 5 on one node, and each pod of the second wave (4 GPUs at most) finds room.
	wave := func(first bool) []job {
		var w []job
		sizes := []int{4, 2, 1}
		if first {
			sizes = append([]int{8}, sizes...)
		}
		for _, g := range sizes {
			w = append(w, mk(podSpec{name: "topo-gpu" + strconv.Itoa(g), gpus: g}, toposchedName, &topo))
		}
		w = append(w, mk(podSpec{name: "topo-share", gpus: 1, gpumem: 8000, gpucores: 30}, toposchedName, &topo))
		for i := 0; i < 3; i++ {
			w = append(w, mk(podSpec{name: "hami-share", gpus: 1, gpumem: 4000, gpucores: 20}, hs.schedulerName, &hami))
		}
		rng.Shuffle(len(w), func(i, j int) { w[i], w[j] = w[j], w[i] })
		return w
	}
	run := func(w []job) {
		for _, j := range w {
			c.createPod(j.scheduler, j.spec)
			time.Sleep(time.Duration(rng.Intn(300)) * time.Millisecond)
		}
		specs := make([]podSpec, len(w))
		for i, j := range w {
			specs[i] = j.spec
		}
		c.waitBoundBy(specs, 3*time.Minute, hs)
	}
	run(wave(true))
	t.Run("NoOvercommitAfterTheFirstWave", func(t *testing.T) { c.assertNoOvercommit(t, registered) })
	// Deletions: the 8-GPU pod, and half of the others of each kind, in a random order.
	gone := []string{topo[0].name}
	for _, list := range [][]podSpec{topo[1:], hami} {
		for _, i := range rng.Perm(len(list))[:len(list)/2] {
			gone = append(gone, list[i].name)
		}
	}
	rng.Shuffle(len(gone), func(i, j int) { gone[i], gone[j] = gone[j], gone[i] })
	for _, name := range gone {
		c.deletePod(name)
	}
	// HAMi's extender killed and restarted, then toposched's leader: each rebuilds its view
	// from the API server, and the next wave must land on what both then see free.
	hs.restartExtender()
	r.proc.Kill9()
	<-r.proc.Done()
	c.proxy.SetEndpoint(r.pod, 0)
	r = c.startReplica(r.pod)
	c.waitReady(r, 90*time.Second)
	run(wave(false))

	alive := func(list []podSpec) []podSpec {
		var out []podSpec
		for _, p := range list {
			if !slices.Contains(gone, p.name) {
				out = append(out, p)
			}
		}
		return out
	}
	var use map[string]*cardUse
	t.Run("NoOvercommit", func(t *testing.T) { use = c.assertNoOvercommit(t, registered) })
	t.Run("HAMiDecoder", func(t *testing.T) { c.assertHAMi(t, alive(topo), registered, plugin) })
	t.Run("NoNodeLockLeft", func(t *testing.T) { c.assertNoNodeLock(t) })
	// After the restarts: HAMi's scheduler and toposched count on each card what the pods'
	// records say (HAMi's scheduler reads toposched's records, toposched reads HAMi's).
	t.Run("ViewsAgree", func(t *testing.T) { c.assertViewsAgree(t, hs, r, use, nodes) })
	t.Logf("%d toposched pods and %d HAMi pods bound, %d deleted", len(topo), len(hami), len(gone))
}

// waitBoundBy is waitBound with HAMi's scheduler's logs in the failure as well.
func (c *cluster) waitBoundBy(specs []podSpec, timeout time.Duration, hs *hamiSched) {
	c.t.Helper()
	c.waitBoundOr(specs, timeout, func() string {
		return fmt.Sprintf("--- kube-scheduler (toposched) log tail:\n%s\n--- HAMi's kube-scheduler log tail:\n%s\n--- HAMi's scheduler log tail:\n%s",
			harness.TailFile(c.out+"/kube-scheduler.log", 3000), harness.TailFile(hs.kube.LogPath, 3000), harness.TailFile(hs.ext.LogPath, 3000))
	})
}

// TestKubeSchedulerAMDUnderHAMi: AMD GPUs on a node HAMi's AMD device plugin registered
// (hami.io/node-amd-register, as Project-HAMi/amd-device-plugin writes it: HAMi's AMD backend
// reads it, checked with HAMi's own GetNodeDevices) get HAMi's AMD records from toposched's
// binds: HAMi's decoder reads exactly the allocation's cards, by their registered id and type,
// the whole card's memory and compute units; HAMi's device plugin side hands them out and
// releases the node lock (with HAMi's functions and "AMD", as the AMD plugin calls them).
func TestKubeSchedulerAMDUnderHAMi(t *testing.T) {
	hamiPeerPath(t)
	c := newCluster(t, "TestKubeSchedulerAMDUnderHAMi")
	mi := &gpuNode{Name: "gpu-mi300x", File: "rccl__mi300x_8xgfx942_8xCX7_baremetal.nccl.xml",
		Labels: map[string]string{"toposched.io/leaf": "leaf-1", "toposched.io/spine": "spine-1"}}
	c.addNodes([]*gpuNode{mi})
	type amdCard struct {
		ID         string         `json:"id"`
		Index      int            `json:"index"`
		Count      int            `json:"count"`
		Devmem     int32          `json:"devmem"`
		Devcore    int32          `json:"devcore"`
		Type       string         `json:"type"`
		Health     bool           `json:"health"`
		Vendor     string         `json:"devicevendor"`
		CustomInfo map[string]any `json:"custominfo"`
	}
	var reg []amdCard
	byBus := map[string]amdCard{}
	for _, g := range mi.Topo.Status.GPUs {
		// "index" is the DRM card number, not PCI order; the card is named by its PCI address.
		card := amdCard{ID: fmt.Sprintf("amd-card-%d", g.Index), Index: g.Index + 1, Count: 10, Devmem: 196288, Devcore: 304,
			Type: "AMD Instinct MI300X", Health: true, Vendor: "amd", CustomInfo: map[string]any{"pciBDF": g.PCIBusID}}
		reg = append(reg, card)
		byBus[g.PCIBusID] = card
	}
	b, _ := json.Marshal(reg)
	node, err := c.cp.Admin.CoreV1().Nodes().Get(context.Background(), mi.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	node.Annotations["hami.io/node-amd-register"] = string(b)
	if _, err := c.cp.Admin.CoreV1().Nodes().Update(context.Background(), node, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	// HAMi's AMD backend reads the registration: eight cards, healthy.
	nb, _ := json.Marshal(node)
	var nodeView struct {
		Devices map[string][]hamiNodeDevice `json:"devices"`
	}
	if err := json.Unmarshal(hamiRun(t, nb, "decode-node"), &nodeView); err != nil {
		t.Fatal(err)
	}
	if got := nodeView.Devices["AMD"]; len(got) != len(reg) {
		t.Fatalf("HAMi reads %d AMD devices from the registration, want %d: %v", len(got), len(reg), nodeView.Devices)
	}
	plugin := startHAMiPlugin(c, mi.Name)
	_, schedulerName := c.startLeaderAndScheduler("-e2e-amd")
	specs := []podSpec{
		{name: "amd-4", gpus: 4, amd: true, fits: true},
		{name: "amd-2", gpus: 2, amd: true, fits: true},
		{name: "amd-1", gpus: 1, amd: true, fits: true},
	}
	for _, p := range specs {
		c.createPod(schedulerName, p)
	}
	c.waitBound(specs, 2*time.Minute)
	var keys []string
	for _, p := range specs {
		keys = append(keys, workloadNS+"/"+p.name)
	}
	plugin.WaitServed(t, keys, 30*time.Second)
	for _, e := range plugin.Errors() {
		t.Errorf("HAMi's device plugin side: %s", e)
	}
	served := plugin.Served()
	for _, p := range specs {
		pod, err := c.cp.Admin.CoreV1().Pods(workloadNS).Get(context.Background(), p.name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var al allocation
		if err := json.Unmarshal([]byte(pod.Annotations["toposched.io/allocation"]), &al); err != nil {
			t.Fatalf("%s: allocation: %v", p.name, err)
		}
		d := hamiDecodePod(t, pod)
		held := d.Allocated["AMD"]
		if len(held) != 2 || len(held[0]) != p.gpus {
			t.Errorf("%s: HAMi reads AMD devices %v, want one container with %d cards", p.name, held, p.gpus)
			continue
		}
		if _, nv := d.Allocated["NVIDIA"]; nv {
			t.Errorf("%s: HAMi reads NVIDIA devices for AMD GPUs", p.name)
		}
		for i, dev := range held[0] {
			want := byBus[al.GPUs[i].PCIBusID]
			if dev.UUID != want.ID || dev.Type != want.Type || dev.Usedmem != want.Devmem || dev.Usedcores != want.Devcore {
				t.Errorf("%s: HAMi device %d is %+v; the allocation's card %s is registered as %s %q, %d MiB, %d CUs",
					p.name, i, dev, al.GPUs[i].PCIBusID, want.ID, want.Type, want.Devmem, want.Devcore)
			}
		}
		if got := served[workloadNS+"/"+p.name]; len(got) != 1 || len(got[0].Containers) != 1 || !slices.Equal(got[0].Containers[0], held[0]) {
			t.Errorf("%s: HAMi's device plugin side handed %v, HAMi's scheduler counts %v", p.name, got, held[0])
		}
		if got := pod.Annotations["hami.io/bind-phase"]; got != "success" {
			t.Errorf("%s: hami.io/bind-phase %q after HAMi's device plugin side served it", p.name, got)
		}
	}
	c.assertNoNodeLock(t)
}
