package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// HAMi's module could not be had: the Go module proxy answers 403 "This module version is not
// available" for github.com/Project-HAMi/HAMi@v2.8.0 (tried once, as the issue says; a refusal
// is final). So the annotations our binds write are read here by a decoder written to HAMi's
// wire rules as HAMi's own source states them (Project-HAMi/HAMi pkg/device/devices.go,
// EncodeContainerDevices / EncodePodSingleDevice / DecodePodDevices / DecodeContainerDevices,
// read at commit 0136974a3700156fedee01c11863f87f5f4fb677; the rules there are unchanged since
// v2.4): it is not HAMi's code, and it is as strict as that decoder is:
//
//   - the pod annotation is one segment per container, init containers first, each followed by
//     ";" (so splitting on ";" yields one entry per container plus a trailing empty one, and
//     HAMi keeps empty entries so that index i is container i);
//   - a container segment is devices each followed by ":"; empty pieces are skipped, any other
//     piece without "," is an error;
//   - a device is "UUID,Type,Usedmem,Usedcores" (at least 4 fields); UUID and Type non-empty;
//     Usedmem and Usedcores are int32 >= 0.
//
// The node registration (hami.io/node-nvidia-register) is HAMi's DeviceInfo list as JSON
// (MarshalNodeDevices in the same file): id, index, count, devmem, devcore, type, numa, mode,
// health.

type hamiDevice struct {
	UUID, Type     string
	Usedmem, Cores int32
}

func hamiDecodeContainer(s string) ([]hamiDevice, error) {
	var out []hamiDevice
	for _, piece := range strings.Split(s, ":") {
		if piece == "" {
			continue
		}
		if !strings.Contains(piece, ",") {
			return nil, fmt.Errorf("malformed container device segment %q", piece)
		}
		f := strings.Split(piece, ",")
		if len(f) < 4 {
			return nil, fmt.Errorf("device %q: missing fields", piece)
		}
		if f[0] == "" || f[1] == "" {
			return nil, fmt.Errorf("device %q: empty UUID or type", piece)
		}
		mem, err := strconv.ParseInt(f[2], 10, 32)
		if err != nil || mem < 0 {
			return nil, fmt.Errorf("device %q: memory %q", piece, f[2])
		}
		cores, err := strconv.ParseInt(f[3], 10, 32)
		if err != nil || cores < 0 {
			return nil, fmt.Errorf("device %q: cores %q", piece, f[3])
		}
		out = append(out, hamiDevice{UUID: f[0], Type: f[1], Usedmem: int32(mem), Cores: int32(cores)})
	}
	return out, nil
}

func hamiDecodePod(s string) ([][]hamiDevice, error) {
	var pd [][]hamiDevice
	for _, seg := range strings.Split(s, ";") {
		cd, err := hamiDecodeContainer(seg)
		if err != nil {
			return nil, err
		}
		pd = append(pd, cd)
	}
	return pd, nil
}

// hamiDeviceInfo is one entry of hami.io/node-nvidia-register (HAMi's DeviceInfo JSON).
type hamiDeviceInfo struct {
	ID      string `json:"id,omitempty"`
	Index   uint   `json:"index,omitempty"`
	Count   int32  `json:"count,omitempty"`
	Devmem  int32  `json:"devmem,omitempty"`
	Devcore int32  `json:"devcore,omitempty"`
	Type    string `json:"type,omitempty"`
	Numa    int    `json:"numa,omitempty"`
	Mode    string `json:"mode,omitempty"`
	Health  bool   `json:"health,omitempty"`
}

// hamiRegistration builds what HAMi's device plugin registers for a node's GPUs: every GPU
// with its UUID and the memory its model has.
func hamiRegistration(n *gpuNode, memMiB int32, model string) string {
	var list []hamiDeviceInfo
	for _, g := range n.Topo.Status.GPUs {
		list = append(list, hamiDeviceInfo{ID: g.UUID, Index: uint(g.Index), Count: 10, Devmem: memMiB, Devcore: 100,
			Type: "NVIDIA-" + model, Numa: 0, Mode: "hami-core", Health: true})
	}
	b, _ := json.Marshal(list)
	return string(b)
}

// registerHAMi annotates node n as HAMi's device plugin registers it (hamiRegistration, and its
// handshake) and returns the memory registered per GPU UUID, by node, for assertHAMi.
func (c *cluster) registerHAMi(n *gpuNode, memMiB int32, model string) map[string]map[string]int32 {
	registered := map[string]map[string]int32{n.Name: {}}
	for _, g := range n.Topo.Status.GPUs {
		registered[n.Name][g.UUID] = memMiB
	}
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{
		"hami.io/node-nvidia-register": hamiRegistration(n, memMiB, model),
		"hami.io/node-handshake":       "Reported " + time.Now().Format(time.DateTime),
	}}})
	if _, err := c.cp.Admin.CoreV1().Nodes().Patch(context.Background(), n.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		c.t.Fatal(err)
	}
	return registered
}

// assertHAMi reads every bound pod's HAMi annotations with the decoder above: pods on nodes
// whose GPUs all have UUIDs carry them, with exactly the allocation's GPUs (UUIDs), the whole
// card's memory and 100 cores for whole GPUs, the asked memory and cores for shared ones;
// pods elsewhere carry none (HAMi knows GPUs by UUID only).
func (c *cluster) assertHAMi(t *testing.T, specs []podSpec, registered map[string]map[string]int32, plugin *hamiPlugin) {
	for _, e := range plugin.Errors() {
		t.Errorf("HAMi device plugin stand-in: %s", e)
	}
	served := plugin.Served()
	ctx := context.Background()
	nodes := map[string]*gpuNode{}
	for _, n := range c.nodes {
		nodes[n.Name] = n
	}
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
		raw, has := pod.Annotations["hami.io/vgpu-devices-to-allocate"]
		if !allUUID {
			if has {
				t.Errorf("%s on %s (GPUs without UUIDs) carries hami.io/vgpu-devices-to-allocate %q", p.name, node.Name, raw)
			}
			continue
		}
		if !has {
			t.Errorf("%s on %s (GPUs with UUIDs): no hami.io/vgpu-devices-to-allocate", p.name, node.Name)
			continue
		}
		var al allocation
		if err := json.Unmarshal([]byte(pod.Annotations["toposched.io/allocation"]), &al); err != nil {
			t.Errorf("%s: allocation: %v", p.name, err)
			continue
		}
		pd, err := hamiDecodePod(raw)
		if err != nil {
			t.Errorf("%s: HAMi's decoding of hami.io/vgpu-devices-to-allocate %q fails: %v", p.name, raw, err)
			continue
		}
		containers := len(pod.Spec.InitContainers) + len(pod.Spec.Containers)
		if len(pd) != containers+1 || len(pd[containers]) != 0 {
			t.Errorf("%s: %q decodes to %d container entries, want %d (one per container, each ended by ';')", p.name, raw, len(pd), containers+1)
			continue
		}
		devs := pd[len(pod.Spec.InitContainers)]
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
			if d.Usedmem != wantMem || d.Cores != wantCores {
				t.Errorf("%s: HAMi device %s: %d MiB, %d%% cores; want %d MiB, %d%%", p.name, d.UUID, d.Usedmem, d.Cores, wantMem, wantCores)
			}
		}
		if got := pod.Annotations["hami.io/vgpu-devices-allocated"]; got != raw {
			t.Errorf("%s: hami.io/vgpu-devices-allocated %q differs from vgpu-devices-to-allocate %q", p.name, got, raw)
		}
		if got := pod.Annotations["hami.io/vgpu-node"]; got != pod.Spec.NodeName {
			t.Errorf("%s: hami.io/vgpu-node %q, pod is on %s", p.name, got, pod.Spec.NodeName)
		}
		// Through HAMi's node lock exactly once on a node HAMi registered (its device plugin
		// then says success); never elsewhere (allocating stays: no plugin there).
		key := workloadNS + "/" + p.name
		if plugin.hamiNodes[node.Name] {
			if served[key] != 1 {
				t.Errorf("%s on %s: served through HAMi's node lock %d times, want 1", p.name, node.Name, served[key])
			}
			if got := pod.Annotations["hami.io/bind-phase"]; got != "success" {
				t.Errorf("%s: hami.io/bind-phase %q after HAMi's device plugin served it", p.name, got)
			}
		} else {
			if served[key] != 0 {
				t.Errorf("%s on %s (no HAMi registration): served through a node lock", p.name, node.Name)
			}
			if got := pod.Annotations["hami.io/bind-phase"]; got != "allocating" {
				t.Errorf("%s: hami.io/bind-phase %q, want allocating", p.name, got)
			}
		}
		checked++
	}
	if checked == 0 {
		t.Errorf("no bound pod on a node with GPU UUIDs: the HAMi decoding was not exercised")
	}
	t.Logf("HAMi annotations of %d pods decoded and checked", checked)
}

// hamiPlugin stands in for HAMi's device plugin on the nodes that carry HAMi's registration,
// doing what it does with the node lock (Project-HAMi/HAMi pkg/util/nodelock/nodelock.go, read
// at commit 02fba77cda993250131cd694ce012925765d6495): once the kubelet would call Allocate
// (the pod is bound to the node), it finds the pod through the lock's owner
// ("<RFC 3339 time>,<namespace>,<name>", HAMi's ParseNodeLock: exactly three parts), decodes its
// devices, sets hami.io/bind-phase=success and releases the lock (a merge patch setting the
// annotation to null, with the Node's resourceVersion, only when the lock names this pod).
// A lock on a node HAMi does not serve is an error: nobody would ever release it.
type hamiPlugin struct {
	c         *cluster
	hamiNodes map[string]bool
	mu        sync.Mutex
	served    map[string]int
	errs      []string
	seen      map[string]bool
	stop      chan struct{}
	done      chan struct{}
}

func startHAMiPlugin(c *cluster, hamiNodes ...string) *hamiPlugin {
	h := &hamiPlugin{c: c, hamiNodes: map[string]bool{}, served: map[string]int{}, seen: map[string]bool{},
		stop: make(chan struct{}), done: make(chan struct{})}
	for _, n := range hamiNodes {
		h.hamiNodes[n] = true
	}
	go func() {
		defer close(h.done)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-h.stop:
				return
			case <-tick.C:
				h.round()
			}
		}
	}()
	c.t.Cleanup(h.Stop)
	return h
}

// Stop ends the plugin's loop (idempotent).
func (h *hamiPlugin) Stop() {
	select {
	case <-h.stop:
	default:
		close(h.stop)
	}
	<-h.done
}

func (h *hamiPlugin) fail(format string, args ...any) {
	h.mu.Lock()
	defer h.mu.Unlock()
	msg := fmt.Sprintf(format, args...)
	if !h.seen[msg] {
		h.seen[msg] = true
		h.errs = append(h.errs, msg)
	}
}

func (h *hamiPlugin) round() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	cl := h.c.cp.Admin
	nodes, err := cl.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return
	}
	for _, node := range nodes.Items {
		lock, ok := node.Annotations["hami.io/mutex.lock"]
		if !ok {
			continue
		}
		if !h.hamiNodes[node.Name] {
			h.fail("node %s, which HAMi's device plugin does not serve, got HAMi's node lock %q", node.Name, lock)
			continue
		}
		parts := strings.Split(lock, ",")
		if len(parts) != 3 {
			h.fail("node %s: lock %q: HAMi's ParseNodeLock wants 3 parts", node.Name, lock)
			continue
		}
		if _, err := time.Parse(time.RFC3339, parts[0]); err != nil {
			h.fail("node %s: lock %q: time: %v", node.Name, lock, err)
			continue
		}
		pod, err := cl.CoreV1().Pods(parts[1]).Get(ctx, parts[2], metav1.GetOptions{})
		if err != nil || pod.Spec.NodeName != node.Name {
			continue // not (yet) bound here: the kubelet would not call Allocate
		}
		key := pod.Namespace + "/" + pod.Name
		if pod.Annotations["hami.io/bind-phase"] != "allocating" || pod.Annotations["hami.io/vgpu-node"] != node.Name {
			h.fail("%s: locked on %s with bind-phase %q, vgpu-node %q", key, node.Name, pod.Annotations["hami.io/bind-phase"], pod.Annotations["hami.io/vgpu-node"])
			continue
		}
		if _, err := hamiDecodePod(pod.Annotations["hami.io/vgpu-devices-to-allocate"]); err != nil {
			h.fail("%s: devices: %v", key, err)
			continue
		}
		patch := []byte(`{"metadata":{"annotations":{"hami.io/bind-phase":"success"}}}`)
		if _, err := cl.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			continue
		}
		if !strings.HasSuffix(lock, ","+pod.Namespace+","+pod.Name) {
			continue
		}
		rel := []byte(fmt.Sprintf(`{"metadata":{"annotations":{"hami.io/mutex.lock":null},"resourceVersion":%q}}`, node.ResourceVersion))
		if _, err := cl.CoreV1().Nodes().Patch(ctx, node.Name, types.MergePatchType, rel, metav1.PatchOptions{}); err != nil {
			continue // a conflict: the next round retries
		}
		h.mu.Lock()
		h.served[key]++
		h.mu.Unlock()
	}
}

// Served returns how many times each pod was served through the lock.
func (h *hamiPlugin) Served() map[string]int {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := map[string]int{}
	for k, v := range h.served {
		out[k] = v
	}
	return out
}

// Errors returns what went wrong.
func (h *hamiPlugin) Errors() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.errs...)
}
