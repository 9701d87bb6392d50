package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"sigs.k8s.io/yaml"

	"toposched.io/e2e/harness"
)

// The real Dynamic Resource Allocation path (issue 46): kube-controller-manager's
// resourceclaim-controller makes each pod's ResourceClaims from its ResourceClaimTemplates,
// kube-scheduler's DynamicResources plugin allocates them from ResourceSlices published exactly
// as NVIDIA's GPU DRA driver and DRANET publish them for the node's hardware (a real topology
// export, the one the node's toposched agent reads), and binds the pod. The toposched profile
// and extenders run as in the other cluster tests, so toposched-specific assertions can be added
// to the helpers below.

const (
	draGPUDriver = "gpu.nvidia.com" // NVIDIA/k8s-dra-driver-gpu: DriverName
	draNICDriver = "dra.net"        // kubernetes-sigs/dranet: pkg/apis/attributes.go AttrPrefix
	// The DeviceClasses as the drivers' charts and examples define them.
	draGPUClass = "gpu.nvidia.com"
	draNICClass = "dranet"
	// resource.kubernetes.io/pcieRoot (k8s.io/dynamic-resource-allocation/deviceattribute).
	draPCIeRoot resourcev1.QualifiedName = "resource.kubernetes.io/pcieRoot"
	// Not in a topology export: the versions an NVML of the R550 branch reports
	// (SystemGetDriverVersion "550.163.01", SystemGetCudaDriverVersion 12040), the same on every
	// node, as the driver publishes them: semver.MustParse(v).String() (Masterminds/semver v1),
	// which drops the leading zero ("550.163.1") and completes "12.4" to "12.4.0".
	draDriverVersion     = "550.163.1"
	draCudaDriverVersion = "12.4.0"
)

// draTopo is what `toposched topo --format json` says of an export, as far as the drivers'
// ResourceSlices need it.
type draTopo struct {
	Status struct {
		GPUs []struct {
			Index     int     `json:"index"`
			PCIBusID  string  `json:"pciBusId"`
			UUID      string  `json:"uuid"`
			MemoryMiB int64   `json:"memoryMiB"`
			Model     string  `json:"model"`
			Vendor    string  `json:"vendor"`
			Parent    *string `json:"parent"`
		} `json:"gpus"`
		NICs []struct {
			Name     string   `json:"name"`
			PCIBusID string   `json:"pciBusId"`
			RDMA     bool     `json:"rdma"`
			Kind     string   `json:"kind"`
			Netdevs  []string `json:"netdevs"`
			Numa     *int64   `json:"numa"`
			Parent   *string  `json:"parent"`
			VendorID string   `json:"vendorId"`
			DeviceID string   `json:"deviceId"`
		} `json:"nics"`
		PCIe []struct {
			ID     string  `json:"id"`
			Kind   string  `json:"kind"`
			Parent *string `json:"parent"`
		} `json:"pcie"`
	} `json:"status"`
}

// pcieRoot is resource.kubernetes.io/pcieRoot of the device whose parent bridge is `parent`, as
// deviceattribute.GetPCIeRootAttributeByPCIBusID computes it: the first element of the device's
// sysfs path under /sys/devices, "pci<domain>:<bus>" of the host bridge (root complex) above it.
// An hwloc export names the host bridge ("hostbridge:0004:00" -> "pci0004:00"); where the export
// has none above the device (NCCL files stop below the root port) it returns false and the slice
// omits the attribute, as both drivers do when the helper fails.
func (d *draTopo) pcieRoot(parent *string) (string, bool) {
	parents := map[string]*string{}
	kinds := map[string]string{}
	for _, p := range d.Status.PCIe {
		parents[p.ID], kinds[p.ID] = p.Parent, p.Kind
	}
	for cur := parent; cur != nil; cur = parents[*cur] {
		if kinds[*cur] == "hostBridge" {
			return "pci" + strings.TrimPrefix(*cur, "hostbridge:"), true
		}
	}
	return "", false
}

// nvmlFacts are what NVML says of a GPU model that a topology export does not carry:
// GetBrandAsString, GetArchitectureAsString, GetCudaComputeCapabilityAsString (go-nvlib).
var nvmlFacts = map[string]struct{ brand, arch, cc string }{
	"Tesla V100": {"Tesla", "Volta", "7.0"},
	"Tesla P100": {"Tesla", "Pascal", "6.0"},
}

// pciIDs are the names the PCI ID database (pci.ids, read by jaypipes/ghw in DRANET) gives the
// exports' NIC vendors and devices.
var pciIDs = map[string]string{
	"0x15b3":        "Mellanox Technologies",
	"0x15b3:0x1017": "MT27800 Family [ConnectX-5]",
	"0x15b3:0x1019": "MT28800 Family [ConnectX-5 Ex]",
	"0x14e4":        "Broadcom Inc. and subsidiaries",
	"0x14e4:0x1657": "NetXtreme BCM5719 Gigabit Ethernet PCIe",
	"0x8086":        "Intel Corporation",
	"0x8086:0x1521": "I350 Gigabit Network Connection",
}

// draNode is a kwok node whose ResourceSlices are made from a real export.
type draNode struct {
	name, file string
	topo       draTopo
	gpuSlice   *resourcev1.ResourceSlice
	nicSlice   *resourcev1.ResourceSlice
}

// gpuDevices are the devices NVIDIA's GPU DRA driver publishes for the export's GPUs
// (NVIDIA/k8s-dra-driver-gpu cmd/gpu-kubelet-plugin/deviceinfo.go GpuInfo.GetDevice, nvlib.go
// getGpuInfo): name gpu-<minor> (the export's index), its attributes and memory capacity.
func (n *draNode) gpuDevices(t *testing.T) []resourcev1.Device {
	var devs []resourcev1.Device
	for _, g := range n.topo.Status.GPUs {
		if g.Vendor != "nvidia" {
			continue
		}
		var facts struct{ brand, arch, cc string }
		found := false
		for prefix, f := range nvmlFacts {
			if strings.HasPrefix(g.Model, prefix) {
				facts, found = f, true
			}
		}
		if !found || g.UUID == "" || g.MemoryMiB == 0 {
			t.Fatalf("%s: GPU %d (%q, uuid %q, %d MiB): the export lacks what NVIDIA's driver publishes", n.file, g.Index, g.Model, g.UUID, g.MemoryMiB)
		}
		attrs := map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{
			"type":                  {StringValue: ptr.To("gpu")},
			"uuid":                  {StringValue: ptr.To(g.UUID)},
			"productName":           {StringValue: ptr.To(g.Model)},
			"brand":                 {StringValue: ptr.To(facts.brand)},
			"architecture":          {StringValue: ptr.To(facts.arch)},
			"cudaComputeCapability": {VersionValue: ptr.To(facts.cc + ".0")},
			"driverVersion":         {VersionValue: ptr.To(draDriverVersion)},
			"cudaDriverVersion":     {VersionValue: ptr.To(draCudaDriverVersion)},
			"pcieBusID":             {StringValue: ptr.To(g.PCIBusID)},
			// GetAddressingModeAsString: "" where NVML answers NOT_SUPPORTED (no coherent
			// system memory path on these PCIe/NVLink2 V100/P100 nodes).
			"addressingMode": {StringValue: ptr.To("")},
		}
		if root, ok := n.topo.pcieRoot(g.Parent); ok {
			attrs[draPCIeRoot] = resourcev1.DeviceAttribute{StringValue: ptr.To(root)}
		}
		devs = append(devs, resourcev1.Device{
			Name:       fmt.Sprintf("gpu-%d", g.Index),
			Attributes: attrs,
			Capacity: map[resourcev1.QualifiedName]resourcev1.DeviceCapacity{
				"memory": {Value: *resource.NewQuantity(g.MemoryMiB<<20, resource.BinarySI)},
			},
		})
	}
	return devs
}

// nicDevices are the devices DRANET publishes for the export's network PCI functions
// (kubernetes-sigs/dranet pkg/inventory/db.go discoverPCIDevices, addLinkAttributes,
// discoverRDMADevices): name "pci-<address with '-'>", dra.net/pciAddress, pciVendor, pciDevice,
// numaNode, resource.kubernetes.io/pcieRoot, and of the interface ifName, type, encapsulation,
// virtual, ebpf, and rdma. MAC, MTU, state and addresses are not in an export and are left out.
func (n *draNode) nicDevices(t *testing.T) []resourcev1.Device {
	var devs []resourcev1.Device
	seen := map[string]bool{}
	for _, nic := range n.topo.Status.NICs {
		if seen[nic.PCIBusID] {
			continue // a second port of one PCI function: DRANET has one device per function
		}
		seen[nic.PCIBusID] = true
		attrs := map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{
			"dra.net/pciAddress": {StringValue: ptr.To(nic.PCIBusID)},
			"dra.net/rdma":       {BoolValue: ptr.To(nic.RDMA)},
		}
		if v, ok := pciIDs[nic.VendorID]; ok {
			attrs["dra.net/pciVendor"] = resourcev1.DeviceAttribute{StringValue: ptr.To(v)}
		}
		if d, ok := pciIDs[nic.VendorID+":"+nic.DeviceID]; ok {
			attrs["dra.net/pciDevice"] = resourcev1.DeviceAttribute{StringValue: ptr.To(d)}
		}
		if nic.Numa != nil {
			attrs["dra.net/numaNode"] = resourcev1.DeviceAttribute{IntValue: ptr.To(*nic.Numa)}
		}
		if root, ok := n.topo.pcieRoot(nic.Parent); ok {
			attrs[draPCIeRoot] = resourcev1.DeviceAttribute{StringValue: ptr.To(root)}
		}
		if len(nic.Netdevs) > 0 {
			typ, encap := "device", "ether"
			if nic.Kind == "infiniband" {
				typ, encap = "ipoib", "infiniband"
			}
			attrs["dra.net/ifName"] = resourcev1.DeviceAttribute{StringValue: ptr.To(nic.Netdevs[0])}
			attrs["dra.net/type"] = resourcev1.DeviceAttribute{StringValue: ptr.To(typ)}
			attrs["dra.net/encapsulation"] = resourcev1.DeviceAttribute{StringValue: ptr.To(encap)}
			attrs["dra.net/virtual"] = resourcev1.DeviceAttribute{BoolValue: ptr.To(false)}
			attrs["dra.net/ebpf"] = resourcev1.DeviceAttribute{BoolValue: ptr.To(false)}
		} else if nic.RDMA && nic.Name != "" {
			attrs["dra.net/rdmaDevice"] = resourcev1.DeviceAttribute{StringValue: ptr.To(nic.Name)}
		}
		devs = append(devs, resourcev1.Device{
			Name:       "pci-" + strings.NewReplacer(":", "-", ".", "-").Replace(nic.PCIBusID),
			Attributes: attrs,
		})
	}
	if len(devs) == 0 {
		t.Fatalf("%s: no NICs for DRANET to publish", n.file)
	}
	return devs
}

// publishSlices creates the node's two ResourceSlices as the drivers' kubelet plugins do
// (k8s.io/dynamic-resource-allocation kubeletplugin Helper.PublishResources and the resourceslice
// controller): one slice per driver, pool = node name, generation 1, owned by the Node,
// generateName "<index>-<driver>-<node>-".
func (c *cluster) publishSlices(n *draNode) {
	t := c.t
	ctx := context.Background()
	node, err := c.cp.Admin.CoreV1().Nodes().Get(ctx, n.name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	mk := func(driver string, devs []resourcev1.Device) *resourcev1.ResourceSlice {
		s := &resourcev1.ResourceSlice{
			ObjectMeta: metav1.ObjectMeta{
				GenerateName: "00000-" + driver + "-" + n.name + "-",
				OwnerReferences: []metav1.OwnerReference{{
					APIVersion: "v1", Kind: "Node", Name: node.Name, UID: node.UID, Controller: ptr.To(true),
				}},
			},
			Spec: resourcev1.ResourceSliceSpec{
				Driver:   driver,
				Pool:     resourcev1.ResourcePool{Name: n.name, Generation: 1, ResourceSliceCount: 1},
				NodeName: ptr.To(n.name),
				Devices:  devs,
			},
		}
		out, err := c.cp.Admin.ResourceV1().ResourceSlices().Create(ctx, s, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("create %s ResourceSlice of %s: %v", driver, n.name, err)
		}
		return out
	}
	n.gpuSlice = mk(draGPUDriver, n.gpuDevices(t))
	n.nicSlice = mk(draNICDriver, n.nicDevices(t))
	b, err := yaml.Marshal([]any{n.gpuSlice, n.nicSlice})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(c.out, "resourceslices-"+n.name+".yaml"), b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// createDeviceClasses creates the two drivers' DeviceClasses as their charts define them:
// NVIDIA's (deployments/helm/nvidia-dra-driver-gpu/templates/deviceclass-gpu.yaml, with
// extendedResourceName on resource.k8s.io/v1) and DRANET's (its documentation's `dranet`).
func (c *cluster) createDeviceClasses() {
	ctx := context.Background()
	for _, dc := range []*resourcev1.DeviceClass{
		{
			ObjectMeta: metav1.ObjectMeta{Name: draGPUClass},
			Spec: resourcev1.DeviceClassSpec{
				Selectors: []resourcev1.DeviceSelector{{CEL: &resourcev1.CELDeviceSelector{
					Expression: "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'"}}},
				ExtendedResourceName: ptr.To("nvidia.com/gpu"),
			},
		},
		{
			ObjectMeta: metav1.ObjectMeta{Name: draNICClass},
			Spec: resourcev1.DeviceClassSpec{
				Selectors: []resourcev1.DeviceSelector{{CEL: &resourcev1.CELDeviceSelector{
					Expression: `device.driver == "dra.net"`}}},
			},
		},
	} {
		if _, err := c.cp.Admin.ResourceV1().DeviceClasses().Create(ctx, dc, metav1.CreateOptions{}); err != nil {
			c.t.Fatalf("create DeviceClass %s: %v", dc.Name, err)
		}
	}
}

// claimTemplate creates a ResourceClaimTemplate in the workload namespace.
func (c *cluster) claimTemplate(name string, spec resourcev1.DeviceClaim) {
	rct := &resourcev1.ResourceClaimTemplate{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: workloadNS},
		Spec:       resourcev1.ResourceClaimTemplateSpec{Spec: resourcev1.ResourceClaimSpec{Devices: spec}},
	}
	if _, err := c.cp.Admin.ResourceV1().ResourceClaimTemplates(workloadNS).Create(context.Background(), rct, metav1.CreateOptions{}); err != nil {
		c.t.Fatalf("create ResourceClaimTemplate %s: %v", name, err)
	}
}

// createClaimPod creates a pod of the toposched profile whose one container uses the claim
// `claim` made from template `tmpl`.
func (c *cluster) createClaimPod(schedulerName, name, claim, tmpl string) {
	if _, err := c.cp.Admin.CoreV1().Pods(workloadNS).Create(context.Background(), claimPod(schedulerName, name, claim, tmpl), metav1.CreateOptions{}); err != nil {
		c.t.Fatalf("create pod %s: %v", name, err)
	}
}

func claimPod(schedulerName, name, claim, tmpl string) *corev1.Pod {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: workloadNS},
		Spec: corev1.PodSpec{
			SchedulerName:  schedulerName,
			ResourceClaims: []corev1.PodResourceClaim{{Name: claim, ResourceClaimTemplateName: ptr.To(tmpl)}},
			Containers: []corev1.Container{{
				Name: "main", Image: "registry.k8s.io/pause:3.10",
				Resources: corev1.ResourceRequirements{
					Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")},
					Claims:   []corev1.ResourceClaim{{Name: claim}},
				},
			}},
		},
	}
	pod.APIVersion, pod.Kind = "v1", "Pod"
	return pod
}

// draScores is what toposched answers kube-scheduler's prioritize-cpu call (the extenders entry
// without managedResources, the only one a pod asking no extended resource reaches) for `pod`
// on `nodes`.
func (c *cluster) draScores(t *testing.T, r *replica, pod *corev1.Pod, nodes []string) map[string]int64 {
	var out []struct {
		Host  string `json:"Host"`
		Score int64  `json:"Score"`
	}
	c.postVerb(t, r, "prioritize-cpu", map[string]any{"Pod": pod, "Nodes": nil, "NodeNames": nodes}, &out)
	scores := map[string]int64{}
	for _, h := range out {
		scores[h.Host] = h.Score
	}
	return scores
}

// freeDevices is each node's free GPUs and RDMA NICs in the replica's state (GET /nodes).
func (c *cluster) freeDevices(t *testing.T, r *replica) map[string][2]int {
	code, body, err := c.replicaGet(r.port, "/nodes")
	if err != nil || code != 200 {
		t.Fatalf("GET /nodes: %d %v %s", code, err, body)
	}
	var nodes struct {
		Nodes []struct {
			Name string `json:"name"`
			Gpus struct {
				Free int `json:"free"`
			} `json:"gpus"`
			RdmaNics struct {
				Free int `json:"free"`
			} `json:"rdmaNics"`
		} `json:"nodes"`
	}
	if err := json.Unmarshal([]byte(body), &nodes); err != nil {
		t.Fatalf("GET /nodes: %v", err)
	}
	out := map[string][2]int{}
	for _, n := range nodes.Nodes {
		out[n.Name] = [2]int{n.Gpus.Free, n.RdmaNics.Free}
	}
	return out
}

// podClaim waits until the resourceclaim-controller has made pod's claim `claim` (named in
// pod.status.resourceClaimStatuses) and returns the ResourceClaim; it checks the claim is the
// controller's: owned by the pod, annotated with the pod's claim name.
func (c *cluster) podClaim(pod, claim string, logs func() string) *resourcev1.ResourceClaim {
	t := c.t
	ctx := context.Background()
	var rc *resourcev1.ResourceClaim
	err := harness.Eventually(60*time.Second, 250*time.Millisecond, func() (bool, error) {
		p, err := c.cp.Admin.CoreV1().Pods(workloadNS).Get(ctx, pod, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		for _, s := range p.Status.ResourceClaimStatuses {
			if s.Name != claim || s.ResourceClaimName == nil {
				continue
			}
			rc, err = c.cp.Admin.ResourceV1().ResourceClaims(workloadNS).Get(ctx, *s.ResourceClaimName, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			owned := false
			for _, o := range rc.OwnerReferences {
				owned = owned || (o.Kind == "Pod" && o.Name == pod && o.UID == p.UID && ptr.Deref(o.Controller, false))
			}
			if !owned || rc.Annotations["resource.kubernetes.io/pod-claim-name"] != claim {
				return false, harness.Permanent(fmt.Errorf("claim %s: owners %v, annotations %v: not the resourceclaim-controller's for pod %s claim %s",
					rc.Name, rc.OwnerReferences, rc.Annotations, pod, claim))
			}
			return true, nil
		}
		return false, fmt.Errorf("pod %s: status.resourceClaimStatuses %v has no %q", pod, p.Status.ResourceClaimStatuses, claim)
	})
	if err != nil {
		t.Fatalf("resourceclaim-controller: %v\n%s", err, logs())
	}
	return rc
}

// waitAllocated waits until kube-scheduler has allocated the claim and bound the pod, and
// returns the claim and the node.
func (c *cluster) waitAllocated(pod string, rc *resourcev1.ResourceClaim, logs func() string) (*resourcev1.ResourceClaim, string) {
	ctx := context.Background()
	var node string
	err := harness.Eventually(90*time.Second, 250*time.Millisecond, func() (bool, error) {
		var err error
		rc, err = c.cp.Admin.ResourceV1().ResourceClaims(workloadNS).Get(ctx, rc.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		node = c.nodeOf(pod)
		if rc.Status.Allocation == nil || node == "" {
			return false, fmt.Errorf("claim %s allocated %v, pod %s on %q", rc.Name, rc.Status.Allocation != nil, pod, node)
		}
		return true, nil
	})
	if err != nil {
		c.t.Fatalf("kube-scheduler: %v\n%s", err, logs())
	}
	return rc, node
}

// allocatedDevices are the claim's results as "request=driver/pool/device", sorted.
func allocatedDevices(rc *resourcev1.ResourceClaim) []string {
	var out []string
	for _, r := range rc.Status.Allocation.Devices.Results {
		out = append(out, r.Request+"="+r.Driver+"/"+r.Pool+"/"+r.Device)
	}
	sort.Strings(out)
	return out
}

// allocationNode is the node the claim's allocation is confined to (its nodeSelector: one term,
// metadata.name In [node], as the DynamicResources plugin writes it for node-local slices).
func allocationNode(rc *resourcev1.ResourceClaim) string {
	ns := rc.Status.Allocation.NodeSelector
	if ns == nil || len(ns.NodeSelectorTerms) != 1 {
		return ""
	}
	term := ns.NodeSelectorTerms[0]
	for _, f := range term.MatchFields {
		if f.Key == "metadata.name" && f.Operator == corev1.NodeSelectorOpIn && len(f.Values) == 1 {
			return f.Values[0]
		}
	}
	return ""
}

// reservedForPod tells whether the claim is reserved for exactly the pod.
func (c *cluster) reservedForPod(rc *resourcev1.ResourceClaim, pod string) bool {
	p, err := c.cp.Admin.CoreV1().Pods(workloadNS).Get(context.Background(), pod, metav1.GetOptions{})
	if err != nil {
		c.t.Fatal(err)
	}
	return len(rc.Status.ReservedFor) == 1 && rc.Status.ReservedFor[0].Resource == "pods" &&
		rc.Status.ReservedFor[0].Name == pod && rc.Status.ReservedFor[0].UID == p.UID
}

// doubleAllocations lists every device that more than one claim in the namespace holds.
func (c *cluster) doubleAllocations() []string {
	claims, err := c.cp.Admin.ResourceV1().ResourceClaims(workloadNS).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		c.t.Fatal(err)
	}
	holders := map[string][]string{}
	for _, rc := range claims.Items {
		if rc.Status.Allocation == nil {
			continue
		}
		for _, r := range rc.Status.Allocation.Devices.Results {
			k := r.Driver + "/" + r.Pool + "/" + r.Device
			holders[k] = append(holders[k], rc.Name)
		}
	}
	var out []string
	for k, h := range holders {
		if len(h) > 1 {
			out = append(out, fmt.Sprintf("%s: %v", k, h))
		}
	}
	sort.Strings(out)
	return out
}

// sliceAttr is attribute `name` of device `dev` in the slice ("" when absent).
func sliceAttr(s *resourcev1.ResourceSlice, dev string, name resourcev1.QualifiedName) string {
	for _, d := range s.Spec.Devices {
		if d.Name == dev {
			if a, ok := d.Attributes[name]; ok && a.StringValue != nil {
				return *a.StringValue
			}
		}
	}
	return ""
}

func TestDRA(t *testing.T) {
	// extender.dra: the extender watches the DRA objects (the chart grants it get/list/watch on
	// them) and ranks the nodes for pods whose devices come from claims.
	c := newCluster(t, "TestDRA", "--set", "extender.dra=true")
	ctx := context.Background()

	// resource.k8s.io/v1 is served by default (DynamicResourceAllocation is GA): no
	// --runtime-config or feature gate is set.
	if _, err := c.cp.Admin.Discovery().ServerResourcesForGroupVersion("resource.k8s.io/v1"); err != nil {
		t.Fatalf("kube-apiserver does not serve resource.k8s.io/v1: %v", err)
	}

	// Lassen (hwloc: 4 V100 with UUIDs in pairs under two PLX switches, each pair on its own
	// POWER9 PHB; 4 mlx5 ports on two more PHBs, none shared with a GPU) and Pascal (hwloc: 2
	// P100 and a ConnectX-5 behind one PLX 8796 switch on root pci0000:00). Both exports name
	// their host bridges, so pcieRoot is exact.
	nodes := []*draNode{
		{name: "dra-lassen", file: "llnl__lassen_ibm-ac922_power9_4xV100_4xmlx5.hwloc2.xml"},
		{name: "dra-pascal", file: "llnl__pascal_relion-x1904gt_2xP100_1xmlx5.hwloc2.xml"},
	}
	specs := make([]*gpuNode, len(nodes))
	for i, n := range nodes {
		specs[i] = &gpuNode{Name: n.name, File: n.file}
	}
	c.addNodes(specs)
	for i, n := range nodes {
		n.file = specs[i].File // now the full path
		o, err := harness.Run(ctx, time.Minute, nil, c.peers.Toposched, "topo", "--input", n.file, "--format", "json")
		if err != nil {
			t.Fatalf("toposched topo %s: %v\n%s", n.file, err, o)
		}
		if err := json.Unmarshal([]byte(o), &n.topo); err != nil {
			t.Fatalf("toposched topo %s: %v", n.file, err)
		}
		c.publishSlices(n)
	}
	lassen, pascal := nodes[0], nodes[1]
	c.createDeviceClasses()

	kcm := c.cp.StartControllerManager(t, filepath.Join(filepath.Dir(c.peers.Scheduler), "kube-controller-manager"),
		[]string{"resourceclaim-controller"}, map[string]string{"resourceclaim-controller": "system:controller:resource-claim-controller"})
	leader, schedulerName := c.startLeaderAndScheduler("-e2e-dra")
	logs := func() string {
		return "--- kube-controller-manager log tail:\n" + kcm.Proc.Tail(3000) +
			"\n--- kube-scheduler log tail:\n" + harness.TailFile(filepath.Join(c.out, "kube-scheduler.log"), 4000)
	}

	// (b) 4 GPUs and an RDMA NIC on one PCIe root, else 2 GPUs and the NIC: no root of either
	// export holds 4 GPUs, and only Pascal's pci0000:00 holds GPUs and an RDMA NIC together.
	c.claimTemplate("gpus-nic", resourcev1.DeviceClaim{
		Requests: []resourcev1.DeviceRequest{
			{Name: "gpus", FirstAvailable: []resourcev1.DeviceSubRequest{
				{Name: "four", DeviceClassName: draGPUClass, AllocationMode: resourcev1.DeviceAllocationModeExactCount, Count: 4},
				{Name: "two", DeviceClassName: draGPUClass, AllocationMode: resourcev1.DeviceAllocationModeExactCount, Count: 2},
			}},
			{Name: "nic", Exactly: &resourcev1.ExactDeviceRequest{
				DeviceClassName: draNICClass, AllocationMode: resourcev1.DeviceAllocationModeExactCount, Count: 1,
				Selectors: []resourcev1.DeviceSelector{{CEL: &resourcev1.CELDeviceSelector{Expression: `device.attributes["dra.net"].rdma == true`}}},
			}},
		},
		Constraints: []resourcev1.DeviceConstraint{{Requests: []string{"gpus", "nic"}, MatchAttribute: ptr.To(resourcev1.FullyQualifiedName(draPCIeRoot))}},
	})
	// (a) one GPU.
	c.claimTemplate("one-gpu", resourcev1.DeviceClaim{
		Requests: []resourcev1.DeviceRequest{{Name: "gpu", Exactly: &resourcev1.ExactDeviceRequest{
			DeviceClassName: draGPUClass, AllocationMode: resourcev1.DeviceAllocationModeExactCount, Count: 1}}},
	})

	c.createClaimPod(schedulerName, "gpus-nic", "devices", "gpus-nic")
	rcB := c.podClaim("gpus-nic", "devices", logs)
	rcB, nodeB := c.waitAllocated("gpus-nic", rcB, logs)
	gotB := allocatedDevices(rcB)
	t.Logf("gpus-nic on %s: claim %s: %v", nodeB, rcB.Name, gotB)
	wantB := []string{
		"gpus/two=gpu.nvidia.com/dra-pascal/gpu-0", "gpus/two=gpu.nvidia.com/dra-pascal/gpu-1",
		"nic=dra.net/dra-pascal/pci-0000-08-00-0",
	}
	if nodeB != pascal.name || strings.Join(gotB, " ") != strings.Join(wantB, " ") {
		t.Errorf("gpus-nic: on %s with %v, want %s with %v (the only root with GPUs and an RDMA NIC)", nodeB, gotB, pascal.name, wantB)
	}
	for _, r := range rcB.Status.Allocation.Devices.Results {
		s := pascal.gpuSlice
		if r.Driver == draNICDriver {
			s = pascal.nicSlice
		}
		if root := sliceAttr(s, r.Device, draPCIeRoot); root != "pci0000:00" {
			t.Errorf("gpus-nic: %s/%s has pcieRoot %q, want pci0000:00", r.Driver, r.Device, root)
		}
	}

	c.createClaimPod(schedulerName, "one-gpu", "gpu", "one-gpu")
	rcA := c.podClaim("one-gpu", "gpu", logs)
	rcA, nodeA := c.waitAllocated("one-gpu", rcA, logs)
	gotA := allocatedDevices(rcA)
	t.Logf("one-gpu on %s: claim %s: %v", nodeA, rcA.Name, gotA)
	if nodeA != lassen.name || len(gotA) != 1 || !strings.HasPrefix(gotA[0], "gpu=gpu.nvidia.com/dra-lassen/gpu-") {
		t.Errorf("one-gpu: on %s with %v, want one of %s's GPUs (%s's are taken)", nodeA, gotA, lassen.name, pascal.name)
	}

	for _, x := range []struct {
		pod, node string
		rc        *resourcev1.ResourceClaim
	}{{"gpus-nic", nodeB, rcB}, {"one-gpu", nodeA, rcA}} {
		if n := allocationNode(x.rc); n != x.node {
			t.Errorf("%s: claim %s allocation.nodeSelector names %q, the pod is bound to %q", x.pod, x.rc.Name, n, x.node)
		}
		if !c.reservedForPod(x.rc, x.pod) {
			t.Errorf("%s: claim %s reservedFor %v, want the pod alone", x.pod, x.rc.Name, x.rc.Status.ReservedFor)
		}
	}
	if d := c.doubleAllocations(); len(d) > 0 {
		t.Errorf("devices allocated to more than one claim: %v", d)
	}

	// toposched counts what the claims hold: Pascal's 2 GPUs and its RDMA NIC, one of Lassen's
	// 4 GPUs (Lassen's 4 RDMA NICs stay free).
	wantFree := map[string][2]int{pascal.name: {0, 0}, lassen.name: {3, 4}}
	waitFree := func(r *replica, want map[string][2]int, what string) {
		var got map[string][2]int
		if err := harness.Eventually(30*time.Second, 250*time.Millisecond, func() (bool, error) {
			got = c.freeDevices(t, r)
			for n, w := range want {
				if got[n] != w {
					return false, fmt.Errorf("free (GPUs, RDMA NICs) %v, want %v", got, want)
				}
			}
			return true, nil
		}); err != nil {
			t.Fatalf("%s: %v\n%s", what, err, r.proc.Tail(3000))
		}
	}
	waitFree(leader, wantFree, "the claims' devices counted")

	// A device-plugin pod on the same node must not get a device a claim holds: Pascal's GPUs are
	// both claimed, so toposched's filter leaves the pod no node (without the claims counted it
	// would bind it to GPU 0, which DRA gave gpus-nic).
	dp := podSpec{name: "dp-on-pascal", gpus: 1, node: pascal.name}
	c.createPod(schedulerName, dp)
	pendingFor := func(name string, d time.Duration) {
		deadline := time.Now().Add(d)
		for time.Now().Before(deadline) {
			if n := c.nodeOf(name); n != "" {
				t.Fatalf("%s bound to %s, onto devices a ResourceClaim holds\n%s", name, n, logs())
			}
			time.Sleep(250 * time.Millisecond)
		}
	}
	pendingFor(dp.name, 8*time.Second)

	// The claims survive a restart: the new process reads them back before it is ready.
	leader.proc.Kill9()
	leader = c.startReplica(leader.pod)
	c.waitReady(leader, 90*time.Second)
	waitFree(leader, wantFree, "after a restart")
	pendingFor(dp.name, 5*time.Second)

	// Deleted pods give their claims' devices back (the resourceclaim-controller deletes the
	// claims it made), and the device-plugin pod binds.
	for _, p := range []string{"gpus-nic", "one-gpu"} {
		c.deletePod(p)
	}
	waitFree(leader, map[string][2]int{lassen.name: {4, 4}}, "claims deleted")
	c.waitBound([]podSpec{{name: dp.name, gpus: 1, node: pascal.name, fits: true}}, 60*time.Second)
	c.deletePod(dp.name)
	waitFree(leader, map[string][2]int{pascal.name: {2, 1}, lassen.name: {4, 4}}, "all pods gone")

	// toposched's rank decides where a claim goes when several nodes fit: one GPU and one RDMA
	// NIC, no constraint. Pascal has them under one PCIe switch (PIX); Lassen's GPUs and NICs sit
	// on different host bridges. The pod lands on the node toposched scores highest.
	c.claimTemplate("gpu-and-nic", resourcev1.DeviceClaim{
		Requests: []resourcev1.DeviceRequest{
			{Name: "gpu", Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: draGPUClass,
				AllocationMode: resourcev1.DeviceAllocationModeExactCount, Count: 1}},
			{Name: "nic", Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: draNICClass,
				AllocationMode: resourcev1.DeviceAllocationModeExactCount, Count: 1,
				Selectors: []resourcev1.DeviceSelector{{CEL: &resourcev1.CELDeviceSelector{Expression: `device.attributes["dra.net"].rdma == true`}}}}},
		},
	})
	aligned := claimPod(schedulerName, "aligned", "devices", "gpu-and-nic")
	var scores map[string]int64
	if err := harness.Eventually(30*time.Second, 250*time.Millisecond, func() (bool, error) {
		scores = c.draScores(t, leader, aligned, []string{lassen.name, pascal.name})
		return scores[pascal.name] > scores[lassen.name], fmt.Errorf("prioritize-cpu scores %v", scores)
	}); err != nil {
		t.Fatalf("toposched does not rank Pascal's aligned GPU and NIC first: %v\n%s", err, leader.proc.Tail(3000))
	}
	t.Logf("aligned: toposched's scores %v", scores)
	c.createClaimPod(schedulerName, "aligned", "devices", "gpu-and-nic")
	rc := c.podClaim("aligned", "devices", logs)
	rc, node := c.waitAllocated("aligned", rc, logs)
	if node != pascal.name {
		t.Errorf("aligned: on %s with %v, want %s, the node toposched ranked first (%v)", node, allocatedDevices(rc), pascal.name, scores)
	}
	if d := c.doubleAllocations(); len(d) > 0 {
		t.Errorf("devices allocated to more than one claim: %v", d)
	}
}
