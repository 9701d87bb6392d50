package e2e

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"toposched.io/e2e/harness"
)

// HAMi v2.10.0's own code reads what toposched writes: e2e/tools/hami is a module of its own
// (HAMi pins k8s.io v0.36) that imports HAMi from ../shared/peers/hami-v2.10.0 (the module proxy
// refuses it) and builds hami-peer (e2e/build-peers.sh hami). The tests call it for every HAMi
// rule: the decoding of a pod's device annotations (device.DecodePodDevices, over the keys the
// device plugin reads and those HAMi's scheduler counts as held), the node registration as HAMi's
// device plugin writes it (device.MarshalNodeDevices), and the device plugin's side of a bind
// (util.GetPendingPod, the plugin's GetNextDeviceRequest, PodAllocationTrySuccess and with it
// pkg/util/nodelock's release). Nothing here re-implements a HAMi rule.

// hamiTag is the HAMi release the tests run against.
const hamiTag = "v2.10.0"

// hamiPeerPath locates hami-peer: the test is skipped, saying so, without HAMi's source tree;
// a missing or stale build fails with the command that builds it.
func hamiPeerPath(t testing.TB) string {
	t.Helper()
	src := filepath.Join(sharedPeersDir(), "hami-"+hamiTag)
	if _, err := os.Stat(filepath.Join(src, "go.mod")); err != nil {
		t.Skipf("HAMi's source tree not found at %s (set TOPOSCHED_SHARED_PEERS): skipping", src)
	}
	dir := filepath.Join(harness.CacheDir(), "hami-"+hamiTag)
	bin := filepath.Join(dir, "hami-peer")
	got, _ := os.ReadFile(filepath.Join(dir, ".tool-hash"))
	if _, err := os.Stat(bin); err != nil || strings.TrimSpace(string(got)) != hamiToolHash(t) {
		t.Fatalf("hami-peer for e2e/tools/hami %s is not built in %s: run e2e/build-peers.sh hami (or e2e/run.sh)", hamiToolHash(t), dir)
	}
	return bin
}

// hamiToolHash is what e2e/build-peers.sh records for the hami-peer it built (tool_hash).
func hamiToolHash(t testing.TB) string {
	h := sha256.New()
	for _, f := range []string{"main.go", "go.mod", "go.sum"} {
		b, err := os.ReadFile(filepath.Join(harness.E2EDir(), "tools", "hami", f))
		if err != nil {
			t.Fatal(err)
		}
		h.Write(b)
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
}

// hamiRun runs hami-peer with stdin and returns its stdout.
func hamiRun(t testing.TB, stdin []byte, args ...string) []byte {
	t.Helper()
	cmd := exec.Command(hamiPeerPath(t), args...)
	cmd.Stdin = bytes.NewReader(stdin)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("hami-peer %v: %v: %s", args, err, stderr.String())
	}
	return out
}

// hamiDevice is one device as HAMi's decoder returns it (device.ContainerDevice).
type hamiDevice struct {
	UUID      string `json:"uuid"`
	Type      string `json:"type"`
	Usedmem   int32  `json:"usedmem"`
	Usedcores int32  `json:"usedcores"`
}

// hamiPodDevices is what HAMi's DecodePodDevices reads from a pod, by vendor ("NVIDIA", "AMD"),
// one entry per container (init containers first) and a trailing empty one: ToAllocate from the
// keys the device plugin reads on Allocate, Allocated from those HAMi's scheduler counts as held.
type hamiPodDevices struct {
	ToAllocate      map[string][][]hamiDevice `json:"toAllocate"`
	ToAllocateError string                    `json:"toAllocateError"`
	Allocated       map[string][][]hamiDevice `json:"allocated"`
	AllocatedError  string                    `json:"allocatedError"`
}

func hamiDecodePod(t testing.TB, pod *corev1.Pod) hamiPodDevices {
	t.Helper()
	b, err := json.Marshal(pod)
	if err != nil {
		t.Fatal(err)
	}
	var out hamiPodDevices
	if err := json.Unmarshal(hamiRun(t, b, "decode-pod"), &out); err != nil {
		t.Fatal(err)
	}
	return out
}

// hamiNodeDevice is one registered GPU (the fields of HAMi's DeviceInfo its plugin registers).
type hamiNodeDevice struct {
	ID      string `json:"id"`
	Index   uint   `json:"index"`
	Count   int32  `json:"count"`
	Devmem  int32  `json:"devmem"`
	Devcore int32  `json:"devcore"`
	Type    string `json:"type"`
	Numa    int    `json:"numa"`
	Mode    string `json:"mode"`
	Health  bool   `json:"health"`
}

// hamiRegistration is hami.io/node-nvidia-register as HAMi's device plugin writes it
// (MarshalNodeDevices) for a node's GPUs: each with its UUID, the model's memory, 10 splits.
func hamiRegistration(t testing.TB, n *gpuNode, memMiB int32, model string) string {
	var list []hamiNodeDevice
	for _, g := range n.Topo.Status.GPUs {
		list = append(list, hamiNodeDevice{ID: g.UUID, Index: uint(g.Index), Count: 10, Devmem: memMiB, Devcore: 100,
			Type: "NVIDIA-" + model, Numa: 0, Mode: "hami-core", Health: true})
	}
	b, _ := json.Marshal(list)
	return strings.TrimSpace(string(hamiRun(t, b, "encode-node")))
}

// registerHAMi annotates node n as HAMi's device plugin registers it (hamiRegistration, and its
// handshake) and returns the memory registered per GPU UUID, by node, for assertHAMi.
func (c *cluster) registerHAMi(n *gpuNode, memMiB int32, model string) map[string]map[string]int32 {
	registered := map[string]map[string]int32{n.Name: {}}
	for _, g := range n.Topo.Status.GPUs {
		registered[n.Name][g.UUID] = memMiB
	}
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{
		"hami.io/node-nvidia-register": hamiRegistration(c.t, n, memMiB, model),
		"hami.io/node-handshake":       "Reported " + time.Now().Format(time.DateTime),
	}}})
	if _, err := c.cp.Admin.CoreV1().Nodes().Patch(context.Background(), n.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		c.t.Fatal(err)
	}
	return registered
}

// assertHAMi reads every bound pod's annotations with HAMi's decoder: pods on nodes whose GPUs
// all have UUIDs carry HAMi's record, which decodes to exactly the allocation's GPUs (UUIDs), the
// whole card's memory and 100 cores for whole GPUs, the asked memory and cores for shared ones,
// both where HAMi's scheduler counts what a pod holds and, on a node HAMi's device plugin serves,
// in what that plugin handed the container; pods elsewhere carry none (HAMi knows GPUs by UUID
// only).
func (c *cluster) assertHAMi(t *testing.T, specs []podSpec, registered map[string]map[string]int32, plugin *hamiPlugin) {
	ctx := context.Background()
	nodes := map[string]*gpuNode{}
	for _, n := range c.nodes {
		nodes[n.Name] = n
	}
	// The device plugin serves a pod after it is bound (as the kubelet calls Allocate then):
	// wait until it has served every pod bound to a node it serves.
	var want []string
	for _, p := range specs {
		pod, err := c.cp.Admin.CoreV1().Pods(workloadNS).Get(ctx, p.name, metav1.GetOptions{})
		if err == nil && plugin.hamiNodes[pod.Spec.NodeName] {
			want = append(want, workloadNS+"/"+p.name)
		}
	}
	plugin.WaitServed(t, want, 30*time.Second)
	for _, e := range plugin.Errors() {
		t.Errorf("HAMi's device plugin side: %s", e)
	}
	served := plugin.Served()
	checked := 0
	for _, p := range specs {
		pod, err := c.cp.Admin.CoreV1().Pods(workloadNS).Get(ctx, p.name, metav1.GetOptions{})
		if err != nil || pod.Spec.NodeName == "" {
			continue
		}
		node := nodes[pod.Spec.NodeName]
		if node == nil {
			continue
		}
		allUUID := len(node.Topo.Status.GPUs) > 0
		for _, g := range node.Topo.Status.GPUs {
			allUUID = allUUID && g.UUID != ""
		}
		decoded := hamiDecodePod(t, pod)
		if decoded.ToAllocateError != "" || decoded.AllocatedError != "" {
			t.Errorf("%s: HAMi cannot decode its annotations: %s %s", p.name, decoded.ToAllocateError, decoded.AllocatedError)
			continue
		}
		held, has := decoded.Allocated["NVIDIA"]
		if !allUUID {
			if has {
				t.Errorf("%s on %s (GPUs without UUIDs): HAMi reads devices %v", p.name, node.Name, held)
			}
			continue
		}
		if !has {
			t.Errorf("%s on %s (GPUs with UUIDs): HAMi reads no NVIDIA devices", p.name, node.Name)
			continue
		}
		var al allocation
		if err := json.Unmarshal([]byte(pod.Annotations["toposched.io/allocation"]), &al); err != nil {
			t.Errorf("%s: allocation: %v", p.name, err)
			continue
		}
		containers := len(pod.Spec.InitContainers) + len(pod.Spec.Containers)
		if len(held) != containers+1 || len(held[containers]) != 0 {
			t.Errorf("%s: HAMi reads %d container entries, want %d (one per container, each ended by ';')", p.name, len(held), containers+1)
			continue
		}
		devs := held[len(pod.Spec.InitContainers)]
		if len(devs) != len(al.GPUs) || len(devs) != p.gpus {
			t.Errorf("%s: HAMi reads %d devices for the container, the allocation has %d GPUs, the pod asked %d", p.name, len(devs), len(al.GPUs), p.gpus)
			continue
		}
		for i, d := range devs {
			if d.UUID != al.GPUs[i].UUID {
				t.Errorf("%s: HAMi device %d is %s, the allocation's GPU is %s", p.name, i, d.UUID, al.GPUs[i].UUID)
			}
			if d.Type != "NVIDIA" {
				t.Errorf("%s: HAMi device %d type %q, want NVIDIA (HAMi's NvidiaGPUDevice)", p.name, i, d.Type)
			}
			// A whole GPU is the card's whole memory: HAMi's registration where the node has
			// one, else what the topology says.
			wantMem, wantCores := registered[node.Name][d.UUID], int32(100)
			if wantMem == 0 {
				for _, g := range node.Topo.Status.GPUs {
					if g.UUID == d.UUID {
						wantMem = int32(g.MemoryMiB)
					}
				}
			}
			if wantMem == 0 && !p.shared() {
				t.Errorf("%s: HAMi record for %s written, but neither HAMi's registration nor the topology knows its memory", p.name, d.UUID)
			}
			if p.shared() {
				wantMem, wantCores = int32(p.gpumem), int32(p.gpucores)
			}
			if d.Usedmem != wantMem || d.Usedcores != wantCores {
				t.Errorf("%s: HAMi device %s: %d MiB, %d%% cores; want %d MiB, %d%%", p.name, d.UUID, d.Usedmem, d.Usedcores, wantMem, wantCores)
			}
		}
		if p.shared() && plugin.hamiNodes[node.Name] {
			// HAMi's own filter takes this share on this card, beside every other pod there.
			c.assertHAMiFits(t, pod, devs[0].UUID)
		}
		if got := pod.Annotations["hami.io/vgpu-node"]; got != pod.Spec.NodeName {
			t.Errorf("%s: hami.io/vgpu-node %q, pod is on %s", p.name, got, pod.Spec.NodeName)
		}
		// Through HAMi's device plugin exactly once on a node HAMi registered, handed exactly
		// these devices; never elsewhere (allocating stays, and the devices to allocate with it:
		// no plugin there).
		key := workloadNS + "/" + p.name
		if plugin.hamiNodes[node.Name] {
			if got := served[key]; len(got) != 1 {
				t.Errorf("%s on %s: served by HAMi's device plugin %d times, want 1", p.name, node.Name, len(got))
			} else if len(got[0].Containers) != 1 || !slices.Equal(got[0].Containers[0], devs) {
				t.Errorf("%s: HAMi's device plugin handed %v, HAMi's scheduler counts %v", p.name, got[0].Containers, devs)
			}
			if got := pod.Annotations["hami.io/bind-phase"]; got != "success" {
				t.Errorf("%s: hami.io/bind-phase %q after HAMi's device plugin served it", p.name, got)
			}
		} else {
			if len(served[key]) != 0 {
				t.Errorf("%s on %s (no HAMi registration): served by HAMi's device plugin", p.name, node.Name)
			}
			if got := pod.Annotations["hami.io/bind-phase"]; got != "allocating" {
				t.Errorf("%s: hami.io/bind-phase %q, want allocating", p.name, got)
			}
			if !reflect.DeepEqual(decoded.ToAllocate["NVIDIA"], held) {
				t.Errorf("%s: HAMi's devices to allocate %v differ from those it counts held %v", p.name, decoded.ToAllocate["NVIDIA"], held)
			}
		}
		checked++
	}
	if checked == 0 {
		t.Errorf("no bound pod on a node with GPU UUIDs: the HAMi decoding was not exercised")
	}
	t.Logf("HAMi annotations of %d pods decoded and checked with HAMi %s's code", checked, hamiTag)
}

// assertHAMiFits: HAMi's NVIDIA Fit (hami-peer fit) accepts pod's request on card, with the
// other pods on pod's node counted as HAMi's scheduler counts them.
func (c *cluster) assertHAMiFits(t *testing.T, pod *corev1.Pod, card string) {
	ctx := context.Background()
	node, err := c.cp.Admin.CoreV1().Nodes().Get(ctx, pod.Spec.NodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	list, err := c.cp.Admin.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + pod.Spec.NodeName})
	if err != nil {
		t.Fatal(err)
	}
	var others []corev1.Pod
	for _, o := range list.Items {
		if o.UID != pod.UID {
			others = append(others, o)
		}
	}
	in, err := json.Marshal(map[string]any{"node": node, "pods": others, "pod": pod, "card": card})
	if err != nil {
		t.Fatal(err)
	}
	var out struct {
		Fits   bool   `json:"fits"`
		Reason string `json:"reason"`
	}
	if err := json.Unmarshal(hamiRun(t, in, "fit"), &out); err != nil {
		t.Fatal(err)
	}
	if !out.Fits {
		t.Errorf("%s on %s card %s: HAMi's filter would not give it that card beside the %d other pods there: %s",
			pod.Name, pod.Spec.NodeName, card, len(others), out.Reason)
	}
}

// hamiServed is one pod HAMi's device plugin side served (hami-peer device-plugin's line).
type hamiServed struct {
	Pod        string         `json:"pod"`
	Node       string         `json:"node"`
	Containers [][]hamiDevice `json:"containers"`
}

// hamiPlugin runs HAMi's device plugin side of a bind (hami-peer device-plugin) on the nodes
// that carry HAMi's registration: once a pod is bound to such a node it hands the pod the devices
// HAMi's decoder reads, sets hami.io/bind-phase=success and releases HAMi's node lock, with HAMi's
// own functions. A lock on a node it does not serve is an error: nobody would ever release it.
type hamiPlugin struct {
	hamiNodes map[string]bool
	cmd       *exec.Cmd
	mu        sync.Mutex
	served    map[string][]hamiServed
	errs      []string
	done      chan struct{}
}

func startHAMiPlugin(c *cluster, hamiNodes ...string) *hamiPlugin {
	h := &hamiPlugin{hamiNodes: map[string]bool{}, served: map[string][]hamiServed{}, done: make(chan struct{})}
	for _, n := range hamiNodes {
		h.hamiNodes[n] = true
	}
	h.cmd = exec.Command(hamiPeerPath(c.t), append([]string{"device-plugin"}, hamiNodes...)...)
	h.cmd.Env = append(os.Environ(), "KUBECONFIG="+c.cp.AdminKubeconfig)
	stdout, err := h.cmd.StdoutPipe()
	if err != nil {
		c.t.Fatal(err)
	}
	stderr, err := h.cmd.StderrPipe()
	if err != nil {
		c.t.Fatal(err)
	}
	logf, err := os.Create(filepath.Join(c.out, "hami-device-plugin.log"))
	if err != nil {
		c.t.Fatal(err)
	}
	if err := h.cmd.Start(); err != nil {
		c.t.Fatalf("start hami-peer device-plugin: %v", err)
	}
	var readers sync.WaitGroup
	readers.Add(2)
	go func() {
		defer readers.Done()
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			fmt.Fprintln(logf, sc.Text())
			var s hamiServed
			if err := json.Unmarshal(sc.Bytes(), &s); err != nil {
				h.fail(fmt.Sprintf("unreadable line %q", sc.Text()))
				continue
			}
			h.mu.Lock()
			h.served[s.Pod] = append(h.served[s.Pod], s)
			h.mu.Unlock()
		}
	}()
	go func() {
		defer readers.Done()
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			fmt.Fprintln(logf, sc.Text())
			if msg, ok := strings.CutPrefix(sc.Text(), "error: "); ok {
				h.fail(msg)
			}
		}
	}()
	go func() {
		readers.Wait()
		err := h.cmd.Wait()
		fmt.Fprintf(logf, "exited: %v\n", err)
		logf.Close()
		close(h.done)
	}()
	c.t.Cleanup(h.Stop)
	return h
}

// Stop ends the plugin (idempotent).
func (h *hamiPlugin) Stop() {
	select {
	case <-h.done:
		return
	default:
	}
	_ = h.cmd.Process.Kill()
	<-h.done
}

func (h *hamiPlugin) fail(msg string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.errs = append(h.errs, msg)
}

// Served returns what was handed to each pod ("namespace/name"), once per time it was served.
func (h *hamiPlugin) Served() map[string][]hamiServed {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := map[string][]hamiServed{}
	for k, v := range h.served {
		out[k] = append([]hamiServed(nil), v...)
	}
	return out
}

// WaitServed waits until each of pods ("namespace/name") has been served, at most `limit`; the
// assertions then say which were not.
func (h *hamiPlugin) WaitServed(t *testing.T, pods []string, limit time.Duration) {
	deadline := time.Now().Add(limit)
	for {
		served := h.Served()
		missing := 0
		for _, p := range pods {
			if len(served[p]) == 0 {
				missing++
			}
		}
		if missing == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Logf("after %v, HAMi's device plugin has not served %d of %d pods bound to its nodes", limit, missing, len(pods))
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Errors returns what went wrong.
func (h *hamiPlugin) Errors() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.errs...)
}
