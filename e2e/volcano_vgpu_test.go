package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/clientcmd"
)

// TestVolcanoVgpu: Volcano's own vGPU (the deviceshare plugin with deviceshare.VGPUEnable,
// added to the file toposched's chart renders, as an operator merges it) beside toposched on one
// DGX-2H. A stand-in for volcano-vgpu-device-plugin registers the node's 16 GPUs (their UUIDs
// from the export) and answers Volcano's handshake. Volcano places vGPU pods (volcano.sh/vgpu-*
// resources, not toposched's) and records their GPUs in volcano.sh/vgpu-ids-new; toposched
// counts them and never gives those GPUs to a whole-GPU pod it places on the same node.
func TestVolcanoVgpu(t *testing.T) {
	c, v := newVolcanoClusterConf(t, "TestVolcanoVgpu", func(conf string) string {
		// deviceshare in the second tier, right after predicates (as Volcano's docs show it).
		const anchor = "  - name: predicates\n"
		if !strings.Contains(conf, anchor) {
			t.Fatalf("no predicates plugin in the chart's volcano-scheduler.conf:\n%s", conf)
		}
		return strings.Replace(conf, anchor, anchor+"  - name: deviceshare\n    arguments:\n      deviceshare.VGPUEnable: true\n", 1)
	})
	dgx := &gpuNode{Name: "gpu-dgx2h", File: "hwloc__nvidia-dgx2h_16xV100_12xNVSwitch.hwloc2.xml"}
	c.addNodes([]*gpuNode{dgx})
	stop := v.vgpuPlugin(dgx, 32768, "Tesla V100-SXM3-32GB-H")
	defer stop()
	c.startAgents()
	leader := v.startToposched()
	c.cp.EnsureNamespace(t, workloadNS)
	v.inClusterCredentials()
	v.start()

	// Twelve vGPU pods of 4 GB each: Volcano's deviceshare chooses their GPUs.
	var vgpu []string
	for i := 0; i < 12; i++ {
		name := fmt.Sprintf("vgpu-%d", i)
		pod := c.podObject(v.schedulerName, podSpec{name: name, node: dgx.Name})
		pod.Spec.Containers[0].Resources.Limits = corev1.ResourceList{
			"volcano.sh/vgpu-number": resource.MustParse("1"),
			"volcano.sh/vgpu-memory": resource.MustParse("4000"),
		}
		if _, err := c.cp.Admin.CoreV1().Pods(workloadNS).Create(context.Background(), pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		vgpu = append(vgpu, name)
	}
	var specs []podSpec
	for _, n := range vgpu {
		specs = append(specs, podSpec{name: n, fits: true})
	}
	v.waitBound(specs, 2*time.Minute)
	used := map[string]bool{} // GPU UUIDs Volcano gave the vGPU pods
	for _, n := range vgpu {
		pod, err := c.cp.Admin.CoreV1().Pods(workloadNS).Get(context.Background(), n, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		ids := pod.Annotations["volcano.sh/vgpu-ids-new"]
		if ids == "" {
			t.Fatalf("%s: Volcano wrote no volcano.sh/vgpu-ids-new (annotations %v)", n, pod.Annotations)
		}
		for _, ctr := range strings.Split(ids, ";") {
			for _, dev := range strings.Split(ctr, ":") {
				if f := strings.Split(dev, ","); len(f) >= 4 {
					used[f[0]] = true
				}
			}
		}
	}
	free := len(dgx.Topo.Status.GPUs) - len(used)
	t.Logf("Volcano's vGPU pods use %d of the DGX-2H's GPUs", len(used))
	if free < 1 {
		t.Fatalf("Volcano left no GPU free (%d used)", len(used))
	}
	// toposched places whole GPUs around them: one more than is free waits, then as many fit.
	tooMany := podSpec{name: "whole-too-many", gpus: free + 1, node: dgx.Name}
	c.createPod(v.schedulerName, tooMany)
	time.Sleep(6 * time.Second)
	if n := c.nodeOf(tooMany.name); n != "" {
		t.Errorf("%s (%d GPUs, %d free beside Volcano's vGPUs) bound to %s", tooMany.name, tooMany.gpus, free, n)
	}
	c.deletePod(tooMany.name)
	whole := podSpec{name: "whole-rest", gpus: free, node: dgx.Name, fits: true}
	c.createPod(v.schedulerName, whole)
	v.waitBound([]podSpec{whole}, 2*time.Minute)
	al := c.allocations([]string{whole.name})[whole.name]
	var got allocation
	if err := json.Unmarshal([]byte(al), &got); err != nil {
		t.Fatalf("%s: %v: %s", whole.name, err, al)
	}
	for _, g := range got.GPUs {
		if used[g.UUID] {
			t.Errorf("%s got GPU %s (%s), which Volcano gave a vGPU pod", whole.name, g.PCIBusID, g.UUID)
		}
	}
	c.assertReplicaState(leader)
}

// inClusterCredentials gives vc-scheduler what a pod has, for the one client of Volcano's that
// knows no other: deviceshare's node patches (pkg/scheduler/api/devices/util.go GetClient uses
// rest.InClusterConfig only; without it vc-scheduler panics on a registered vGPU node). The
// ServiceAccount token and the CA go to the fixed path client-go reads them from,
// /var/run/secrets/kubernetes.io/serviceaccount (removed afterwards), and the API server's
// address to KUBERNETES_SERVICE_HOST/PORT. Skipped, saying why, where that path is not ours to
// write (not root, or a real pod's credentials are there).
func (v *volcano) inClusterCredentials() {
	c, t := v.c, v.c.t
	const dir = "/var/run/secrets/kubernetes.io/serviceaccount"
	if _, err := os.Stat(dir); err == nil {
		t.Skipf("%s exists (inside a pod?): not overwriting it; Volcano's deviceshare needs it for its own client", dir)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Skipf("cannot create %s (%v): Volcano's deviceshare reads its client's credentials only from there", dir, err)
	}
	t.Cleanup(func() { _ = os.RemoveAll("/var/run/secrets/kubernetes.io") })
	kc := c.cp.ServiceAccountKubeconfig(t, c.out, volcanoNS, volcanoRelease+"-scheduler")
	cfg, err := clientcmd.LoadFromFile(kc)
	if err != nil {
		t.Fatal(err)
	}
	var token string
	for _, a := range cfg.AuthInfos {
		token = a.Token
	}
	ca, err := os.ReadFile(c.cp.CA.Path)
	if err != nil {
		t.Fatal(err)
	}
	for name, b := range map[string][]byte{"token": []byte(token), "ca.crt": ca, "namespace": []byte(volcanoNS)} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	u, err := url.Parse(c.cp.URL)
	if err != nil {
		t.Fatal(err)
	}
	v.extraEnv = append(v.extraEnv, "KUBERNETES_SERVICE_HOST="+u.Hostname(), "KUBERNETES_SERVICE_PORT="+u.Port())
}

// newVolcanoClusterConf is newVolcanoCluster with the rendered volcano-scheduler.conf edited by
// edit before it is given to Volcano's chart (an operator's merge of a plugin of their own).
func newVolcanoClusterConf(t *testing.T, name string, edit func(string) string, toposchedArgs ...string) (*cluster, *volcano) {
	v := findVolcano(t)
	v.editConf = edit
	return newVolcanoClusterWith(t, v, name, toposchedArgs...)
}

// vgpuPlugin stands in for volcano-vgpu-device-plugin on node n: the node's capacity of
// Volcano's vGPU resources, its registration (volcano.sh/node-vgpu-register:
// "UUID,split count,memory MiB,type,health,mode:" per GPU, as Volcano's decodeNodeDevices reads
// it) and, every second, the handshake answered (volcano.sh/node-vgpu-handshake "Reported_<time>"
// where Volcano wrote "Requesting_<time>"). It returns a stop function.
func (v *volcano) vgpuPlugin(n *gpuNode, memMiB int, model string) func() {
	c, t := v.c, v.c.t
	ctx := context.Background()
	var reg strings.Builder
	for _, g := range n.Topo.Status.GPUs {
		if g.UUID == "" {
			t.Fatalf("%s: GPU %s has no UUID in the export", n.Name, g.PCIBusID)
		}
		fmt.Fprintf(&reg, "%s,10,%d,NVIDIA-%s,true,hami-core:", g.UUID, memMiB, model)
	}
	node, err := c.cp.Admin.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	gpus := int64(len(n.Topo.Status.GPUs))
	for k, q := range map[corev1.ResourceName]int64{"volcano.sh/vgpu-number": gpus * 10, "volcano.sh/vgpu-memory": gpus * int64(memMiB), "volcano.sh/vgpu-cores": gpus * 100} {
		node.Status.Capacity[k] = *resource.NewQuantity(q, resource.DecimalSI)
		node.Status.Allocatable[k] = *resource.NewQuantity(q, resource.DecimalSI)
	}
	if _, err := c.cp.Admin.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	report := func() error {
		patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{
			"volcano.sh/node-vgpu-register":  reg.String(),
			"volcano.sh/node-vgpu-handshake": "Reported_" + time.Now().Format("2006.01.02 15:04:05"),
		}}})
		_, err := c.cp.Admin.CoreV1().Nodes().Patch(ctx, n.Name, types.MergePatchType, patch, metav1.PatchOptions{})
		return err
	}
	if err := report(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
				nd, err := c.cp.Admin.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
				if err == nil && strings.HasPrefix(nd.Annotations["volcano.sh/node-vgpu-handshake"], "Requesting") {
					_ = report()
				}
			}
		}
	}()
	_ = os.WriteFile(filepath.Join(c.out, "vgpu-register.txt"), []byte(reg.String()), 0o644)
	return func() { close(done); wg.Wait() }
}
