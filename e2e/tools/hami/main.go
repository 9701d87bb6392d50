// hami-peer runs HAMi v2.10's own code for the e2e suite, which cannot import HAMi (HAMi pins
// k8s.io v0.36; the suite's module pins the versions of the API server it tests): every decision
// below is a call into HAMi's packages, built from ../shared/peers/hami-v2.10.0 through the
// replace line in go.mod. Nothing here re-implements a HAMi rule.
//
//	hami-peer decode-pod  < pod.json    what HAMi reads from a pod's device annotations
//	hami-peer decode-node < node.json   what HAMi reads from a node's device registrations
//	hami-peer encode-node < devices.json  hami.io/node-nvidia-register as HAMi's plugin writes it
//	hami-peer fit < fit.json             whether HAMi's scheduler would give a pod one card
//	hami-peer device-plugin NODE...     HAMi's device plugin's side of a bind, on NODEs
//
// device-plugin does, for each NODE, what HAMi's NVIDIA device plugin (and, for a pod handed AMD
// GPUs, HAMi's AMD device plugin, through the same HAMi functions) does when the kubelet
// calls Allocate (pkg/device-plugin/nvidiadevice/nvinternal/plugin/server.go, Allocate): the
// pod it serves is the one HAMi's util.GetPendingPod selects on the node (the node lock's owner,
// else a pending pod with HAMi's bind annotations), here once that pod is bound to the node (the
// kubelet calls Allocate only then); it takes the devices of each container in turn as HAMi's
// decoder reads them, erases them from hami.io/vgpu-devices-to-allocate as the plugin does, then
// calls HAMi's PodAllocationTrySuccess, which sets hami.io/bind-phase=success and releases
// HAMi's node lock. It prints one JSON line per served pod on stdout, and one line starting with
// "error: " on stderr for what HAMi's code refuses (a lock it cannot parse, devices it cannot
// decode) and for a node lock on a node it does not serve (nobody would ever release it).
// KUBECONFIG names the API server, as for HAMi's own binaries.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/Project-HAMi/HAMi/pkg/device"
	"github.com/Project-HAMi/HAMi/pkg/device-plugin/nvidiadevice/nvinternal/plugin"
	"github.com/Project-HAMi/HAMi/pkg/device/amd"
	"github.com/Project-HAMi/HAMi/pkg/device/nvidia"
	"github.com/Project-HAMi/HAMi/pkg/scheduler/config"
	"github.com/Project-HAMi/HAMi/pkg/util"
	"github.com/Project-HAMi/HAMi/pkg/util/client"
	"github.com/Project-HAMi/HAMi/pkg/util/nodelock"
)

// Device is one device of a container as HAMi's decoder returns it (device.ContainerDevice).
type Device struct {
	UUID      string `json:"uuid"`
	Type      string `json:"type"`
	Usedmem   int32  `json:"usedmem"`
	Usedcores int32  `json:"usedcores"`
}

func devices(cd device.ContainerDevices) []Device {
	out := []Device{}
	for _, d := range cd {
		out = append(out, Device{UUID: d.UUID, Type: d.Type, Usedmem: d.Usedmem, Usedcores: d.Usedcores})
	}
	return out
}

// podDevices: by vendor (HAMi's common word, "NVIDIA", "AMD"), one list per container entry.
func podDevices(checklist map[string]string, annos map[string]string) (map[string][][]Device, error) {
	pd, err := device.DecodePodDevices(checklist, annos)
	if err != nil {
		return nil, err
	}
	out := map[string][][]Device{}
	for vendor, single := range pd {
		for _, cd := range single {
			out[vendor] = append(out[vendor], devices(cd))
		}
	}
	return out, nil
}

func readJSON(v any) error {
	b, err := io.ReadAll(os.Stdin)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}

func writeJSON(v any) {
	b, _ := json.Marshal(v)
	fmt.Println(string(b))
}

// decodePod: HAMi's DecodePodDevices over the keys its scheduler writes for the device plugin
// (InRequestDevices) and those its scheduler reads back as what a pod holds (SupportDevices).
func decodePod() error {
	var pod corev1.Pod
	if err := readJSON(&pod); err != nil {
		return err
	}
	out := map[string]any{}
	toAllocate, err := podDevices(device.InRequestDevices, pod.Annotations)
	if err != nil {
		out["toAllocateError"] = err.Error()
	} else {
		out["toAllocate"] = toAllocate
	}
	allocated, err := podDevices(device.SupportDevices, pod.Annotations)
	if err != nil {
		out["allocatedError"] = err.Error()
	} else {
		out["allocated"] = allocated
	}
	out["keys"] = map[string]any{"toAllocate": device.InRequestDevices, "allocated": device.SupportDevices}
	writeJSON(out)
	return nil
}

// NodeDevice is one registered device as HAMi's scheduler reads it (device.DeviceInfo).
type NodeDevice struct {
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

// decodeNode: each vendor's GetNodeDevices, as HAMi's scheduler reads a node's registration.
func decodeNode() error {
	var node corev1.Node
	if err := readJSON(&node); err != nil {
		return err
	}
	out := map[string]any{}
	errs := map[string]string{}
	for vendor, dev := range device.GetDevices() {
		infos, err := dev.GetNodeDevices(node)
		if err != nil {
			errs[vendor] = err.Error()
			continue
		}
		list := []NodeDevice{}
		for _, i := range infos {
			list = append(list, NodeDevice{ID: i.ID, Index: i.Index, Count: i.Count, Devmem: i.Devmem, Devcore: i.Devcore,
				Type: i.Type, Numa: i.Numa, Mode: i.Mode, Health: i.Health})
		}
		out[vendor] = list
	}
	writeJSON(map[string]any{"devices": out, "errors": errs})
	return nil
}

// encodeNode: HAMi's MarshalNodeDevices of a list of devices (NodeDevice), the value HAMi's
// NVIDIA device plugin registers in hami.io/node-nvidia-register.
func encodeNode() error {
	var list []NodeDevice
	if err := readJSON(&list); err != nil {
		return err
	}
	var infos []*device.DeviceInfo
	for _, d := range list {
		infos = append(infos, &device.DeviceInfo{ID: d.ID, Index: d.Index, Count: d.Count, Devmem: d.Devmem,
			Devcore: d.Devcore, Type: d.Type, Numa: d.Numa, Mode: d.Mode, Health: d.Health})
	}
	fmt.Println(device.MarshalNodeDevices(infos))
	return nil
}

// fit: whether HAMi's NVIDIA Fit (pkg/device/nvidia, the function HAMi's scheduler filters
// with) accepts the pod's device request on one card of a node, given the other pods there. The
// card's usage is built as HAMi's scheduler builds it (pkg/scheduler, buildNodeUsage and
// getNodesUsage): the registration's devices, plus every other pod's devices as HAMi's decoder
// reads them from hami.io/vgpu-devices-allocated. Input: {"node": Node, "pods": [Pod], "pod":
// Pod, "card": UUID}; output: {"fits": bool, "reason": "..."}.
func fit() error {
	var in struct {
		Node corev1.Node  `json:"node"`
		Pods []corev1.Pod `json:"pods"`
		Pod  corev1.Pod   `json:"pod"`
		Card string       `json:"card"`
	}
	if err := readJSON(&in); err != nil {
		return err
	}
	nv := device.GetDevices()[nvidia.NvidiaGPUDevice]
	infos, err := nv.GetNodeDevices(in.Node)
	if err != nil {
		return err
	}
	var usage []*device.DeviceUsage
	info := &device.NodeInfo{ID: in.Node.Name, Node: &in.Node, Devices: map[string][]device.DeviceInfo{}}
	for _, d := range infos {
		info.Devices[d.DeviceVendor] = append(info.Devices[d.DeviceVendor], *d)
		if d.ID != in.Card {
			continue
		}
		usage = append(usage, &device.DeviceUsage{ID: d.ID, Index: d.Index, Count: d.Count, Totalmem: d.Devmem,
			Totalcore: d.Devcore, MigProfiles: d.MIGProfiles, Mode: d.Mode, Type: d.Type, Numa: d.Numa, Health: d.Health,
			PodInfos: []*device.PodInfo{}})
	}
	if len(usage) == 0 {
		writeJSON(map[string]any{"fits": false, "reason": "card " + in.Card + " is not in HAMi's registration"})
		return nil
	}
	for _, p := range in.Pods {
		held, err := device.DecodePodDevices(device.SupportDevices, p.Annotations)
		if err != nil {
			return fmt.Errorf("%s/%s: %v", p.Namespace, p.Name, err)
		}
		for _, single := range held {
			for _, ctr := range single {
				for _, d := range ctr {
					if d.UUID == in.Card {
						usage[0].Used += max(d.Slots, 1)
						usage[0].Usedmem += d.Usedmem
						usage[0].Usedcores += d.Usedcores
					}
				}
			}
		}
	}
	for _, ctr := range device.Resourcereqs(&in.Pod) {
		req, ok := ctr[nvidia.NvidiaGPUDevice]
		if !ok || req.Nums == 0 {
			continue
		}
		ok, _, reason := nv.Fit(usage, req, &in.Pod, info, &device.PodDevices{})
		writeJSON(map[string]any{"fits": ok, "reason": reason})
		return nil
	}
	return fmt.Errorf("the pod asks no NVIDIA device")
}

// Served is printed once per pod the device plugin served.
type Served struct {
	Pod        string     `json:"pod"`
	Node       string     `json:"node"`
	Containers [][]Device `json:"containers"`
}

func devicePlugin(nodes []string) error {
	client.InitGlobalClient()
	served := map[string]bool{}
	for _, n := range nodes {
		served[n] = true
	}
	reported := map[string]bool{}
	allocated := map[types.UID]bool{} // the kubelet calls Allocate once per pod
	fail := func(format string, args ...any) {
		msg := fmt.Sprintf(format, args...)
		if !reported[msg] {
			reported[msg] = true
			fmt.Fprintln(os.Stderr, "error: "+msg)
		}
	}
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		list, err := client.GetClient().CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err == nil {
			for _, n := range list.Items {
				lock, locked := n.Annotations[nodelock.NodeLockKey]
				if locked && !served[n.Name] {
					fail("node %s, which HAMi's device plugin does not serve, got HAMi's node lock %q", n.Name, lock)
					continue
				}
				if served[n.Name] {
					allocate(ctx, n.Name, allocated, fail)
				}
			}
		}
		cancel()
		time.Sleep(100 * time.Millisecond)
	}
}

// allocate is one kubelet Allocate on node, as HAMi's plugin answers it.
func allocate(ctx context.Context, node string, allocated map[types.UID]bool, fail func(string, ...any)) {
	if lock, ok := nodeLock(ctx, node); ok {
		if _, _, _, err := nodelock.ParseNodeLock(lock); err != nil {
			fail("node %s: HAMi cannot parse its node lock %q: %v", node, lock, err)
			return
		}
	}
	pod, err := util.GetPendingPod(ctx, node)
	if err != nil || pod == nil || pod.Spec.NodeName != node || allocated[pod.UID] {
		return // nothing to allocate, or not bound here yet: the kubelet would not call Allocate
	}
	single, err := device.DecodePodDevices(device.InRequestDevices, pod.Annotations)
	if err != nil {
		fail("%s/%s: HAMi cannot decode its devices: %v", pod.Namespace, pod.Name, err)
		plugin.PodAllocationFailed(node, pod, nvidia.NodeLockNvidia)
		return
	}
	// The vendor whose devices the pod is handed: NVIDIA's plugin, or AMD's (Project-HAMi/
	// amd-device-plugin, not in HAMi's tree: it finds the pod and releases the lock through
	// the same HAMi functions, GetAllocatePodByNode and PodAllocationTrySuccess, with "AMD").
	vendor := nvidia.NvidiaGPUDevice
	if _, ok := single[nvidia.NvidiaGPUDevice]; !ok {
		if _, ok := single[amd.AMDDevice]; ok {
			vendor = amd.AMDDevice
		}
	}
	pd := single[vendor]
	out := Served{Pod: pod.Namespace + "/" + pod.Name, Node: node}
	for i := range pd {
		if len(pd[i]) == 0 {
			continue
		}
		// The container the plugin serves next is the one GetNextDeviceRequest names.
		_, devs, err := plugin.GetNextDeviceRequest(vendor, *pod)
		if err != nil {
			fail("%s/%s: %v", pod.Namespace, pod.Name, err)
			plugin.PodAllocationFailed(node, pod, nvidia.NodeLockNvidia)
			return
		}
		out.Containers = append(out.Containers, devices(devs))
		pd[i] = device.ContainerDevices{}
		encoded := device.EncodePodSingleDevice(pd)
		if err := util.PatchPodAnnotations(pod, map[string]string{device.InRequestDevices[vendor]: encoded}); err != nil {
			return // the next round retries
		}
		pod.Annotations[device.InRequestDevices[vendor]] = encoded
	}
	plugin.PodAllocationTrySuccess(node, vendor, nvidia.NodeLockNvidia, pod)
	if lock, still := nodeLock(ctx, node); still {
		if _, ns, name, err := nodelock.ParseNodeLock(lock); err == nil && ns == pod.Namespace && name == pod.Name {
			return // not released (a conflict): the next round serves the pod again
		}
	}
	allocated[pod.UID] = true
	writeJSON(out)
}

func nodeLock(ctx context.Context, node string) (string, bool) {
	n, err := client.GetClient().CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		return "", false
	}
	v, ok := n.Annotations[nodelock.NodeLockKey]
	return v, ok
}

func main() {
	klog.SetOutput(io.Discard)
	klog.LogToStderr(false)
	config.InitDefaultDevices()
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: hami-peer decode-pod|decode-node|encode-node|fit|device-plugin NODE...")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "decode-pod":
		err = decodePod()
	case "decode-node":
		err = decodeNode()
	case "encode-node":
		err = encodeNode()
	case "fit":
		err = fit()
	case "device-plugin":
		nodes := os.Args[2:]
		sort.Strings(nodes)
		err = devicePlugin(nodes)
	default:
		err = fmt.Errorf("unknown command %q", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "hami-peer:", err)
		os.Exit(1)
	}
}
