package e2e

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/yaml"

	"toposched.io/e2e/harness"
)

// The pieces every cluster scenario shares: the chart installed by the real helm, kwok nodes
// built from real topology exports, one toposched agent per node with the agent
// ServiceAccount's token, and toposched serve replicas with the extender's.

var ntopoGVR = schema.GroupVersionResource{Group: "toposched.io", Version: "v1alpha1", Resource: "nodetopologies"}

// gpuNode is a fake node whose hardware is a real topology export.
type gpuNode struct {
	Name, File  string
	Labels      map[string]string
	Annotations map[string]string // e.g. HAMi's device plugin registration
	Taints      []corev1.Taint
	Topo        topoDoc // what `toposched topo --format json` says of File
	// GPUCapacity, when set, is the nvidia.com/gpu the node advertises instead of its GPU count
	// (HAMi's device plugin advertises each card its split count times).
	GPUCapacity int
}

// topoDoc is the part of a NodeTopology document the tests read.
type topoDoc struct {
	Status struct {
		GPUs []struct {
			Index     int    `json:"index"`
			PCIBusID  string `json:"pciBusId"`
			UUID      string `json:"uuid"`
			MemoryMiB int64  `json:"memoryMiB"`
			Vendor    string `json:"vendor"`
		} `json:"gpus"`
		NICs []struct {
			Name     string `json:"name"`
			PCIBusID string `json:"pciBusId"`
			RDMA     bool   `json:"rdma"`
		} `json:"nics"`
		Links struct {
			GPUNic [][]string `json:"gpuNic"` // [gpu][nic] link class, as nvidia-smi topo -m prints it
		} `json:"links"`
	} `json:"status"`
}

func (n *gpuNode) rdmaNICs() int {
	c := 0
	for _, nic := range n.Topo.Status.NICs {
		if nic.RDMA {
			c++
		}
	}
	return c
}

// cluster is one scenario's running system.
type cluster struct {
	t        *testing.T // the test the helpers fail (a subtest's while it runs: as)
	root     *testing.T // the scenario's test: processes live as long as it does
	peers    harness.Peers
	out      string
	cp       *harness.ControlPlane
	dyn      *harness.Dynamic
	ns       string // the chart's namespace
	nodes    []*gpuNode
	agentSA  string
	extSA    string
	schedSA  string
	extDep   *appsv1.Deployment
	schedDep *appsv1.Deployment // schedulerMode secondary
	agentDS  *appsv1.DaemonSet
	extSvc   *corev1.Service
	cms      map[string]*corev1.ConfigMap
	replicas map[string]*replica // by pod name
	proxy    *harness.ServiceProxy
	// tls is the chart's TLS between the scheduler and the extender, read from the Secrets its
	// Deployments mount (nil when the extender serves plain HTTP); replicaHTTP verifies the
	// replicas with its CA and presents no client certificate, as the kubelet's probes do.
	tls         *harness.ProxyTLS
	replicaHTTP *http.Client
	// verbPaths are the URL paths of the verbs the chart's KubeSchedulerConfiguration names.
	verbPaths []string
	// volcano: the chart runs in schedulerMode volcano and vc-scheduler places the pods
	// (volcano_test.go); binds are Volcano's, allocations come from its allocate events.
	volcano bool
}

type replica struct {
	pod, portFile string
	port          int
	proc          *harness.Proc
}

func newCluster(t *testing.T, name string, helmArgs ...string) *cluster {
	t.Helper()
	return newClusterWith(t, name, nil, helmArgs...)
}

// newClusterWith is newCluster with `before` run once the control plane is up, before the
// chart is installed (Volcano's own install comes first in volcano mode).
func newClusterWith(t *testing.T, name string, before func(c *cluster), helmArgs ...string) *cluster {
	t.Helper()
	c := &cluster{t: t, root: t, ns: helmNamespace, replicas: map[string]*replica{}, cms: map[string]*corev1.ConfigMap{}}
	c.peers = harness.FindPeers(t)
	c.out = harness.OutputDir(t, name)
	c.cp = harness.StartControlPlane(t, c.peers, c.out)
	c.dyn = c.cp.NewDynamic()
	ctx := context.Background()
	if before != nil {
		before(c)
	}

	helm := harness.NewHelm(t, c.peers.Helm, c.cp.AdminKubeconfig)
	args := append([]string{"install", "toposched", harness.ChartDir(), "--namespace", c.ns, "--create-namespace", "--timeout", "2m"}, helmArgs...)
	if _, err := helm.Run(ctx, 3*time.Minute, args...); err != nil {
		t.Fatalf("helm install: %v", err)
	}
	c.cp.EnsureDefaultServiceAccount(t, c.ns)

	// The chart's objects, as the API server holds them.
	deps, err := c.cp.Admin.AppsV1().Deployments(c.ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range deps.Items {
		switch deps.Items[i].Labels["app.kubernetes.io/component"] {
		case "extender":
			c.extDep = &deps.Items[i]
		case "scheduler":
			c.schedDep = &deps.Items[i]
			c.schedSA = deps.Items[i].Spec.Template.Spec.ServiceAccountName
		}
	}
	dss, err := c.cp.Admin.AppsV1().DaemonSets(c.ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range dss.Items {
		if dss.Items[i].Labels["app.kubernetes.io/component"] == "agent" {
			c.agentDS = &dss.Items[i]
		}
	}
	svcs, err := c.cp.Admin.CoreV1().Services(c.ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range svcs.Items {
		if svcs.Items[i].Labels["app.kubernetes.io/component"] == "extender" && svcs.Items[i].Spec.Selector["toposched.io/leader"] == "true" {
			c.extSvc = &svcs.Items[i]
		}
	}
	cms, err := c.cp.Admin.CoreV1().ConfigMaps(c.ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range cms.Items {
		c.cms[cms.Items[i].Name] = &cms.Items[i]
	}
	if c.extDep == nil || c.agentDS == nil || c.extSvc == nil {
		t.Fatalf("the chart did not install an extender Deployment (%v), agent DaemonSet (%v) and extender Service selecting toposched.io/leader (%v)",
			c.extDep != nil, c.agentDS != nil, c.extSvc != nil)
	}
	c.extSA = c.extDep.Spec.Template.Spec.ServiceAccountName
	c.agentSA = c.agentDS.Spec.Template.Spec.ServiceAccountName
	c.tls = c.chartTLS()
	c.replicaHTTP = &http.Client{Timeout: 3 * time.Second}
	if c.tls != nil {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(c.tls.CA) {
			t.Fatal("the extender's ca.crt holds no certificate")
		}
		c.replicaHTTP.Transport = &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: c.tls.ServerName}}
	}
	return c
}

// podFile is the content of a file as the container sees it: a key of a ConfigMap or Secret
// volume it mounts (items honoured), read from the API server.
func (c *cluster) podFile(spec corev1.PodSpec, ct corev1.Container, path string) ([]byte, error) {
	for _, vm := range ct.VolumeMounts {
		rel, ok := strings.CutPrefix(path, strings.TrimSuffix(vm.MountPath, "/")+"/")
		if !ok {
			continue
		}
		files, err := c.volumeFiles(spec, vm.Name)
		if err != nil {
			return nil, err
		}
		if b, ok := files[rel]; ok {
			return b, nil
		}
		return nil, fmt.Errorf("%s: no key %s in volume %s", path, rel, vm.Name)
	}
	return nil, fmt.Errorf("%s is under no volume mount of container %s", path, ct.Name)
}

// volumeFiles is what the kubelet writes for a ConfigMap or Secret volume: file path -> content.
func (c *cluster) volumeFiles(spec corev1.PodSpec, name string) (map[string][]byte, error) {
	ctx := context.Background()
	for _, v := range spec.Volumes {
		if v.Name != name {
			continue
		}
		data := map[string][]byte{}
		var items []corev1.KeyToPath
		switch {
		case v.ConfigMap != nil:
			cm, err := c.cp.Admin.CoreV1().ConfigMaps(c.ns).Get(ctx, v.ConfigMap.Name, metav1.GetOptions{})
			if err != nil {
				return nil, fmt.Errorf("volume %s: ConfigMap %s: %w", name, v.ConfigMap.Name, err)
			}
			for k, val := range cm.Data {
				data[k] = []byte(val)
			}
			items = v.ConfigMap.Items
		case v.Secret != nil:
			sec, err := c.cp.Admin.CoreV1().Secrets(c.ns).Get(ctx, v.Secret.SecretName, metav1.GetOptions{})
			if err != nil {
				return nil, fmt.Errorf("volume %s: Secret %s: %w", name, v.Secret.SecretName, err)
			}
			data = sec.Data
			items = v.Secret.Items
		default:
			return nil, nil // emptyDir, hostPath: nothing the chart wrote
		}
		if len(items) == 0 {
			return data, nil
		}
		files := map[string][]byte{}
		for _, it := range items {
			b, ok := data[it.Key]
			if !ok {
				return nil, fmt.Errorf("volume %s: no key %s", name, it.Key)
			}
			files[it.Path] = b
		}
		return files, nil
	}
	return nil, fmt.Errorf("no volume %s", name)
}

// materialize writes every ConfigMap and Secret volume the container mounts to
// c.out/mounts/<pod>/<mountPath>, as the kubelet would, and returns mountPath -> local directory.
func (c *cluster) materialize(pod string, spec corev1.PodSpec, ct corev1.Container) map[string]string {
	t := c.t
	mounts := map[string]string{}
	for _, vm := range ct.VolumeMounts {
		files, err := c.volumeFiles(spec, vm.Name)
		if err != nil {
			t.Fatalf("pod %s: %v", pod, err)
		}
		if files == nil {
			continue
		}
		dir := filepath.Join(c.out, "mounts", pod, strings.TrimPrefix(vm.MountPath, "/"))
		if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		for k, val := range files {
			if err := os.WriteFile(filepath.Join(dir, k), val, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		mounts[vm.MountPath] = dir
	}
	return mounts
}

// localPath maps a path inside the container to the materialized copy ("" when no mount has it).
func localPath(mounts map[string]string, path string) string {
	for mp, dir := range mounts {
		if rel, ok := strings.CutPrefix(path, strings.TrimSuffix(mp, "/")+"/"); ok {
			return filepath.Join(dir, rel)
		}
	}
	return ""
}

// chartTLS reads the chart's TLS as the pods get it: the extender's --tls-cert/--tls-key and the
// ca.crt beside them, the scheduler's tlsConfig certFile/keyFile and serverName (nil when the
// extender serves plain HTTP).
func (c *cluster) chartTLS() *harness.ProxyTLS {
	t := c.t
	spec := c.extDep.Spec.Template.Spec
	ct := spec.Containers[0]
	flag := func(name string) string {
		for i, a := range ct.Args {
			if a == name && i+1 < len(ct.Args) {
				return ct.Args[i+1]
			}
		}
		return ""
	}
	certPath := flag("--tls-cert")
	if certPath == "" {
		return nil
	}
	read := func(spec corev1.PodSpec, ct corev1.Container, path string) []byte {
		b, err := c.podFile(spec, ct, path)
		if err != nil {
			t.Fatalf("the chart's TLS: %v", err)
		}
		return b
	}
	p := &harness.ProxyTLS{
		ServerCert: read(spec, ct, certPath),
		ServerKey:  read(spec, ct, flag("--tls-key")),
		CA:         read(spec, ct, filepath.Join(filepath.Dir(certPath), "ca.crt")),
		ServerName: c.extSvc.Name + "." + c.ns + ".svc",
	}
	if caPath := flag("--tls-client-ca"); caPath != "" && !bytes.Equal(read(spec, ct, caPath), p.CA) {
		t.Fatalf("the extender's --tls-client-ca %s is not the ca.crt of its serving Secret", caPath)
	}
	if c.schedDep == nil {
		return p
	}
	ext := c.chartExtender()
	tc, _ := ext["tlsConfig"].(map[string]any)
	if name, _ := tc["serverName"].(string); name != "" {
		p.ServerName = name
	}
	sspec := c.schedDep.Spec.Template.Spec
	if certFile, _ := tc["certFile"].(string); certFile != "" {
		keyFile, _ := tc["keyFile"].(string)
		p.ClientCert, p.ClientKey = read(sspec, sspec.Containers[0], certFile), read(sspec, sspec.Containers[0], keyFile)
	}
	return p
}

// chartExtender is the extenders[0] entry of the chart's KubeSchedulerConfiguration.
func (c *cluster) chartExtender() map[string]any {
	t := c.t
	var text string
	for _, cm := range c.cms {
		if v, ok := cm.Data["scheduler-config.yaml"]; ok {
			text = v
		}
	}
	if text == "" {
		t.Fatal("the chart installed no ConfigMap with scheduler-config.yaml")
	}
	var cfg map[string]any
	if err := yaml.Unmarshal([]byte(text), &cfg); err != nil {
		t.Fatalf("scheduler-config.yaml: %v", err)
	}
	exts, _ := cfg["extenders"].([]any)
	if len(exts) != 2 {
		t.Fatalf("scheduler-config.yaml: want two extenders (devices, and CPU-only pods), got %d", len(exts))
	}
	return exts[0].(map[string]any)
}

// replicaURL is the URL of path on a replica's local port, in the scheme the chart serves.
func (c *cluster) replicaURL(port int, path string) string {
	scheme := "http"
	if c.tls != nil {
		scheme = "https"
	}
	return fmt.Sprintf("%s://127.0.0.1:%d%s", scheme, port, path)
}

// replicaGet GETs path from a replica as a probe would (no client certificate).
func (c *cluster) replicaGet(port int, path string) (int, string, error) {
	resp, err := c.replicaHTTP.Get(c.replicaURL(port, path))
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	return resp.StatusCode, string(b), err
}

// addNodes creates a CPU-only system node (for the extender's pods) and one GPU node per
// topology file, with the capacity a device plugin would advertise (nvidia.com/gpu = the
// GPUs, rdma/ib = the RDMA NICs), then starts kwok to run them.
func (c *cluster) addNodes(specs []*gpuNode) {
	t := c.t
	ctx := context.Background()
	topoDir := harness.TopologiesDir(t)
	mk := func(name string, labels, annotations map[string]string, taints []corev1.Taint, extra corev1.ResourceList) {
		capacity := corev1.ResourceList{
			corev1.ResourceCPU:    resource.MustParse("128"),
			corev1.ResourceMemory: resource.MustParse("1Ti"),
			corev1.ResourcePods:   resource.MustParse("110"),
		}
		for k, v := range extra {
			capacity[k] = v
		}
		l := map[string]string{"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "type": "kwok"}
		for k, v := range labels {
			l[k] = v
		}
		ann := map[string]string{"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"}
		for k, v := range annotations {
			ann[k] = v
		}
		node := &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: l, Annotations: ann},
			Spec:       corev1.NodeSpec{Taints: taints},
			Status:     corev1.NodeStatus{Capacity: capacity, Allocatable: capacity},
		}
		if _, err := c.cp.Admin.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create node %s: %v", name, err)
		}
	}
	mk("system-0", nil, nil, nil, nil)
	for _, n := range specs {
		n.File = filepath.Join(topoDir, n.File)
		o, err := harness.Run(ctx, time.Minute, nil, c.peers.Toposched, "topo", "--input", n.File, "--format", "json")
		if err != nil {
			t.Fatalf("toposched topo %s: %v\n%s", n.File, err, o)
		}
		if err := json.Unmarshal([]byte(o), &n.Topo); err != nil {
			t.Fatalf("toposched topo %s: %v", n.File, err)
		}
		labels := map[string]string{"nvidia.com/gpu.present": "true"}
		for k, v := range n.Labels {
			labels[k] = v
		}
		gpus := len(n.Topo.Status.GPUs)
		if n.GPUCapacity > 0 {
			gpus = n.GPUCapacity
		}
		gpuResource := corev1.ResourceName("nvidia.com/gpu")
		if len(n.Topo.Status.GPUs) > 0 && n.Topo.Status.GPUs[0].Vendor == "amd" {
			gpuResource, labels = "amd.com/gpu", map[string]string{}
			for k, v := range n.Labels {
				labels[k] = v
			}
		}
		mk(n.Name, labels, n.Annotations, n.Taints, corev1.ResourceList{
			gpuResource: *resource.NewQuantity(int64(gpus), resource.DecimalSI),
			"rdma/ib":   *resource.NewQuantity(int64(n.rdmaNICs()), resource.DecimalSI),
		})
	}
	c.nodes = specs
	args := []string{"--kubeconfig", c.cp.AdminKubeconfig, "--manage-nodes-with-annotation-selector", "kwok.x-k8s.io/node=fake",
		"--config", strings.Join(c.peers.KwokStages, ","), "--node-lease-duration-seconds", "40"}
	harness.Start(t, c.out, "kwok", nil, c.peers.Kwok, args...)
	err := harness.Eventually(60*time.Second, 500*time.Millisecond, func() (bool, error) {
		nodes, err := c.cp.Admin.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		for _, n := range nodes.Items {
			ready := false
			for _, cond := range n.Status.Conditions {
				ready = ready || (cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue)
			}
			if !ready {
				return false, fmt.Errorf("node %s not Ready", n.Name)
			}
		}
		return len(nodes.Items) == len(specs)+1, nil
	})
	if err != nil {
		t.Fatalf("kwok did not make the nodes Ready: %v\n%s", err, harness.TailFile(filepath.Join(c.out, "kwok.log"), 3000))
	}
	// The API server's TaintNodesByCondition admission taints every new Node
	// node.kubernetes.io/not-ready:NoSchedule; the node lifecycle controller (controller-manager,
	// not run here) lifts it once the node is Ready. Do its job.
	nodes, err := c.cp.Admin.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range nodes.Items {
		n := &nodes.Items[i]
		var keep []corev1.Taint
		for _, taint := range n.Spec.Taints {
			if taint.Key != corev1.TaintNodeNotReady {
				keep = append(keep, taint)
			}
		}
		if len(keep) != len(n.Spec.Taints) {
			n.Spec.Taints = keep
			if _, err := c.cp.Admin.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{}); err != nil {
				t.Fatalf("lift the not-ready taint of %s: %v", n.Name, err)
			}
		}
	}
}

// startAgents runs one `toposched agent` per GPU node with the chart's DaemonSet args, the
// agent ServiceAccount's token and --input FILE standing in for the node's /sys, and waits
// until every node has its NodeTopology and labels.
func (c *cluster) startAgents() {
	t := c.t
	ctx := context.Background()
	kc := c.cp.ServiceAccountKubeconfig(t, c.out, c.ns, c.agentSA)
	ct := c.agentDS.Spec.Template.Spec.Containers[0]
	if len(ct.Args) == 0 || ct.Args[0] != "agent" {
		t.Fatalf("agent DaemonSet args %v do not start with 'agent'", ct.Args)
	}
	for _, n := range c.nodes {
		args := append([]string{}, ct.Args...)
		args = append(args, "--kubeconfig", kc, "--input", n.File, "--nvml-library", "none")
		harness.Start(t, c.out, "agent-"+n.Name, []string{"NODE_NAME=" + n.Name}, c.peers.Toposched, args...)
	}
	for _, n := range c.nodes {
		err := harness.Eventually(60*time.Second, 500*time.Millisecond, func() (bool, error) {
			if _, err := c.dyn.Client.Resource(ntopoGVR).Get(ctx, n.Name, metav1.GetOptions{}); err != nil {
				return false, err
			}
			node, err := c.cp.Admin.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			want := strconv.Itoa(len(n.Topo.Status.GPUs))
			if node.Labels["toposched.io/gpu-count"] != want {
				return false, fmt.Errorf("node %s label toposched.io/gpu-count = %q, want %s", n.Name, node.Labels["toposched.io/gpu-count"], want)
			}
			return true, nil
		})
		if err != nil {
			t.Fatalf("agent for %s: %v\n%s", n.Name, err, harness.TailFile(filepath.Join(c.out, "agent-"+n.Name+".log"), 3000))
		}
	}
}

// extenderPod creates the Pod object of one extender replica from the Deployment's template,
// bound to system-0 (what the ReplicaSet controller and the scheduler would do), so that
// POD_NAME names a real pod whose leader label the Service selects.
func (c *cluster) extenderPod(name string) {
	t := c.t
	tmpl := c.extDep.Spec.Template.DeepCopy()
	pod := &corev1.Pod{ObjectMeta: tmpl.ObjectMeta, Spec: tmpl.Spec}
	pod.Name = name
	pod.Namespace = c.ns
	pod.Spec.NodeName = "system-0"
	pod.Spec.Affinity = nil
	if _, err := c.cp.Admin.CoreV1().Pods(c.ns).Create(context.Background(), pod, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create extender pod %s: %v", name, err)
	}
}

// startReplica runs the Deployment's command (toposched-extender) for pod name with its args and env, the
// extender ServiceAccount's token, the ConfigMaps it mounts written to local files, and a local
// port instead of the container port.
func (c *cluster) startReplica(name string) *replica {
	t := c.t
	kc := filepath.Join(c.out, c.extSA+".kubeconfig")
	if _, err := os.Stat(kc); err != nil {
		kc = c.cp.ServiceAccountKubeconfig(t, c.out, c.ns, c.extSA)
	}
	spec := c.extDep.Spec.Template.Spec
	ct := spec.Containers[0]
	// The ConfigMap and the TLS Secret the chart mounts (the kubelet refuses to start a pod
	// whose volume's ConfigMap or Secret does not exist; so does materialize).
	mounts := c.materialize(name, spec, ct)
	env := []string{"POD_NAME=" + name, "POD_NAMESPACE=" + c.ns}
	for _, e := range ct.Env {
		if e.ValueFrom == nil {
			env = append(env, e.Name+"="+e.Value)
		}
	}
	var args []string
	for i := 0; i < len(ct.Args); i++ {
		a := strings.ReplaceAll(ct.Args[i], "$(POD_NAMESPACE)", c.ns)
		a = strings.ReplaceAll(a, "$(POD_NAME)", name)
		if a == "--port" && i+1 < len(ct.Args) {
			i++ // replaced below by a free local port
			continue
		}
		if local := localPath(mounts, a); local != "" {
			a = local
		}
		args = append(args, a)
	}
	r := &replica{pod: name, portFile: filepath.Join(c.out, name+".port")}
	_ = os.Remove(r.portFile)
	args = append(args, "--kubeconfig", kc, "--address", "127.0.0.1", "--port", "0", "--port-file", r.portFile)
	// The container's command names the binary: the chart runs toposched-extender (`toposched
	// serve` without hwloc), built next to toposched.
	bin := c.peers.Toposched
	if len(ct.Command) == 1 && filepath.Base(ct.Command[0]) == "toposched-extender" {
		bin = filepath.Join(filepath.Dir(c.peers.Toposched), "toposched-extender")
	}
	// The process lives as long as the whole test, also when a subtest (re)starts it.
	r.proc = harness.Start(c.root, c.out, name, env, bin, args...)
	err := harness.Eventually(60*time.Second, 200*time.Millisecond, func() (bool, error) {
		if ok, err := r.proc.Exited(); ok {
			return false, harness.Permanent(fmt.Errorf("exited: %v", err))
		}
		b, err := os.ReadFile(r.portFile)
		if err != nil {
			return false, err
		}
		p, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil || p == 0 {
			return false, fmt.Errorf("port file %q", b)
		}
		r.port = p
		return true, nil
	})
	if err != nil {
		t.Fatalf("extender %s did not start: %v\n%s", name, err, r.proc.Tail(4000))
	}
	c.replicas[name] = r
	if c.proxy != nil {
		c.proxy.SetEndpoint(name, r.port)
	}
	return r
}

// waitReady waits for the replica's /readyz to answer 200.
func (c *cluster) waitReady(r *replica, timeout time.Duration) {
	c.t.Helper()
	err := harness.Eventually(timeout, 250*time.Millisecond, func() (bool, error) {
		if ok, err := r.proc.Exited(); ok {
			return false, harness.Permanent(fmt.Errorf("exited: %v", err))
		}
		code, body, err := c.replicaGet(r.port, "/readyz")
		if err != nil {
			return false, err
		}
		return code == 200, fmt.Errorf("/readyz %d: %s", code, body)
	})
	if err != nil {
		c.t.Fatalf("extender %s not ready: %v\n%s", r.pod, err, r.proc.Tail(4000))
	}
}

// startProxy starts the stand-in for the extender's Service.
func (c *cluster) startProxy() {
	p, err := harness.NewServiceProxy(c.cp.Admin, c.ns, c.extSvc.Spec.Selector, c.tls)
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(p.Close)
	for name, r := range c.replicas {
		p.SetEndpoint(name, r.port)
	}
	c.proxy = p
}

// leaderPods are the extender pods labelled toposched.io/leader=true.
func (c *cluster) leaderPods() []string {
	eps, err := c.proxy.Endpoints(context.Background())
	if err != nil {
		c.t.Fatal(err)
	}
	return eps
}

// leaseHolder is the holderIdentity of the extender's Lease.
func (c *cluster) leaseHolder() string {
	leaseName := ""
	args := c.extDep.Spec.Template.Spec.Containers[0].Args
	for i, a := range args {
		if a == "--lease-name" && i+1 < len(args) {
			leaseName = args[i+1]
		}
	}
	if leaseName == "" {
		leaseName = "toposched-extender"
	}
	l, err := c.cp.Admin.CoordinationV1().Leases(c.ns).Get(context.Background(), leaseName, metav1.GetOptions{})
	if err != nil || l.Spec.HolderIdentity == nil {
		return ""
	}
	return *l.Spec.HolderIdentity
}

// checkPublishedTopologies: every NodeTopology the agents wrote still holds every GPU and NIC
// field `toposched topo` produces for the same file (the CRD's schema pruned nothing the
// extender reads).
func (c *cluster) checkPublishedTopologies() {
	t := c.t
	for _, n := range c.nodes {
		obj, err := c.dyn.Client.Resource(ntopoGVR).Get(context.Background(), n.Name, metav1.GetOptions{})
		if err != nil {
			t.Errorf("NodeTopology %s: %v", n.Name, err)
			continue
		}
		want, err := os.ReadFile(filepath.Join(c.out, "topo-"+n.Name+".json"))
		if err != nil {
			o, err2 := harness.Run(context.Background(), time.Minute, nil, c.peers.Toposched, "topo", "--input", n.File, "--format", "json")
			if err2 != nil {
				t.Fatal(err2)
			}
			want = []byte(o)
			_ = os.WriteFile(filepath.Join(c.out, "topo-"+n.Name+".json"), want, 0o644)
		}
		var wantDoc map[string]any
		if err := json.Unmarshal(want, &wantDoc); err != nil {
			t.Fatal(err)
		}
		// The API server drops null fields of a structural schema's non-nullable properties
		// (absent and null mean the same to the extender's decoder); compare without them.
		ws, _ := dropNulls(wantDoc["status"]).(map[string]any)
		gs, _ := obj.Object["status"].(map[string]any)
		for _, key := range []string{"gpus", "nics", "numaNodes", "pcie", "links", "fingerprint"} {
			wj, _ := json.Marshal(ws[key])
			gj, _ := json.Marshal(gs[key])
			if string(wj) != string(gj) {
				t.Errorf("NodeTopology %s: status.%s as stored by the API server differs from `toposched topo` of %s:\n stored: %.400s\n   topo: %.400s",
					n.Name, key, filepath.Base(n.File), gj, wj)
			}
		}
	}
}

// checkPrinterColumns: `kubectl get ntopo -o wide` as the API server computes it (a Table: the
// CRD's additionalPrinterColumns evaluated on the stored objects). Every column has a value for
// every node the agents published (a JSONPath that names no field gives an empty cell, a date that
// does not parse "<invalid>"), and the counts and class are the node's own.
func (c *cluster) checkPrinterColumns() {
	t := c.t
	ctx := context.Background()
	raw, err := c.cp.Admin.Discovery().RESTClient().Get().AbsPath("/apis/toposched.io/v1alpha1/nodetopologies").
		SetHeader("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io").Do(ctx).Raw()
	if err != nil {
		t.Fatalf("listing nodetopologies as a Table: %v", err)
	}
	var table metav1.Table
	if err := json.Unmarshal(raw, &table); err != nil {
		t.Fatalf("the Table does not parse: %v\n%.400s", err, raw)
	}
	col := map[string]int{}
	for i, d := range table.ColumnDefinitions {
		col[d.Name] = i
	}
	for _, name := range []string{"Name", "GPUs", "NICs", "RDMA", "Model", "Class", "Generation", "Heartbeat", "Age"} {
		if _, ok := col[name]; !ok {
			t.Errorf("kubectl get ntopo: no column %s (columns: %+v)", name, table.ColumnDefinitions)
		}
	}
	if t.Failed() {
		return
	}
	rows := map[string][]any{}
	for _, r := range table.Rows {
		if name, ok := r.Cells[col["Name"]].(string); ok {
			rows[name] = r.Cells
		}
	}
	for _, n := range c.nodes {
		cells, ok := rows[n.Name]
		if !ok {
			t.Errorf("kubectl get ntopo: no row for %s", n.Name)
			continue
		}
		for name, i := range col {
			if cells[i] == nil || cells[i] == "<invalid>" {
				t.Errorf("kubectl get ntopo: %s: column %s is %v (its JSONPath finds no valid field)", n.Name, name, cells[i])
			}
		}
		node, err := c.cp.Admin.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		want := map[string]string{
			"GPUs":  strconv.Itoa(len(n.Topo.Status.GPUs)),
			"NICs":  strconv.Itoa(len(n.Topo.Status.NICs)),
			"RDMA":  strconv.Itoa(n.rdmaNICs()),
			"Class": node.Labels["toposched.io/topology-class"],
		}
		for name, w := range want {
			if got := fmt.Sprint(cells[col[name]]); got != w || w == "" {
				t.Errorf("kubectl get ntopo: %s: %s = %q, want %q", n.Name, name, got, w)
			}
		}
		t.Logf("kubectl get ntopo -o wide: %v", cells)
	}
}

// schedulerConfig takes the chart's KubeSchedulerConfiguration, points the extender's
// urlPrefix at the Service stand-in, its tlsConfig files at local copies of what the scheduler
// Deployment mounts, and the client at the scheduler ServiceAccount's kubeconfig.
func (c *cluster) schedulerConfig(kubeconfig string) (path, schedulerName string) {
	t := c.t
	var text string
	for _, cm := range c.cms {
		if v, ok := cm.Data["scheduler-config.yaml"]; ok {
			text = v
		}
	}
	if text == "" {
		t.Fatal("the chart installed no ConfigMap with scheduler-config.yaml")
	}
	var cfg map[string]any
	if err := yaml.Unmarshal([]byte(text), &cfg); err != nil {
		t.Fatalf("scheduler-config.yaml: %v", err)
	}
	exts, _ := cfg["extenders"].([]any)
	if len(exts) != 2 {
		t.Fatalf("scheduler-config.yaml: want two extenders (devices, and CPU-only pods), got %d", len(exts))
	}
	c.verbPaths = nil
	for _, e := range exts {
		ext := e.(map[string]any)
		path := urlPath(t, ext)
		ext["urlPrefix"] = c.proxy.URL + path
		if tc, ok := ext["tlsConfig"].(map[string]any); ok {
			if c.schedDep == nil {
				t.Fatal("scheduler-config.yaml has a tlsConfig but the chart installed no scheduler Deployment")
			}
			spec := c.schedDep.Spec.Template.Spec
			mounts := c.materialize("kube-scheduler", spec, spec.Containers[0])
			for _, k := range []string{"caFile", "certFile", "keyFile"} {
				if v, ok := tc[k].(string); ok {
					local := localPath(mounts, v)
					if local == "" {
						t.Fatalf("tlsConfig.%s %s is under no volume the scheduler Deployment mounts", k, v)
					}
					tc[k] = local
				}
			}
		}
		for _, k := range []string{"filterVerb", "prioritizeVerb", "preemptVerb", "bindVerb"} {
			if v, ok := ext[k].(string); ok && v != "" {
				c.verbPaths = append(c.verbPaths, path+"/"+v)
			}
		}
	}
	cfg["clientConnection"] = map[string]any{"kubeconfig": kubeconfig}
	profiles, _ := cfg["profiles"].([]any)
	if len(profiles) == 0 {
		t.Fatal("scheduler-config.yaml: no profiles")
	}
	schedulerName, _ = profiles[0].(map[string]any)["schedulerName"].(string)
	b, err := yaml.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	path = filepath.Join(c.out, "scheduler-config.yaml")
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return path, schedulerName
}

// startLeaderAndScheduler starts the agents, one extender replica named after the chart's
// Deployment plus `suffix`, the Service stand-in, and, once the replica holds the lease, the
// chart's kube-scheduler; it returns the replica and the profile's schedulerName.
func (c *cluster) startLeaderAndScheduler(suffix string) (*replica, string) {
	t := c.t
	c.startAgents()
	name := c.extDep.Name + suffix
	c.extenderPod(name)
	r := c.startReplica(name)
	c.startProxy()
	c.waitReady(r, 90*time.Second)
	if err := harness.Eventually(60*time.Second, 250*time.Millisecond, func() (bool, error) {
		return strings.HasPrefix(c.leaseHolder(), name), fmt.Errorf("lease holder %q", c.leaseHolder())
	}); err != nil {
		t.Fatalf("%v\n%s", err, r.proc.Tail(3000))
	}
	c.cp.EnsureNamespace(t, workloadNS)
	return r, c.startScheduler()
}

// nodeOf is the node workload pod `name` is bound to ("" while pending).
func (c *cluster) nodeOf(name string) string {
	pod, err := c.cp.Admin.CoreV1().Pods(workloadNS).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		c.t.Fatalf("get pod %s: %v", name, err)
	}
	return pod.Spec.NodeName
}

// deletePod deletes workload pod `name` at once and waits until the API server has no such pod.
func (c *cluster) deletePod(name string) {
	ctx := context.Background()
	if c.volcano {
		// No kube-controller-manager runs here: do its garbage collector's part and delete the
		// PodGroup vc-controller-manager made for the pod (owned by it), or a stale Inqueue
		// group would keep holding its queue's room.
		defer c.deleteOwnedPodGroups(c.podUID(name))
	}
	if err := c.cp.Admin.CoreV1().Pods(workloadNS).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
		c.t.Fatalf("delete pod %s: %v", name, err)
	}
	if err := harness.Eventually(60*time.Second, 250*time.Millisecond, func() (bool, error) {
		_, err := c.cp.Admin.CoreV1().Pods(workloadNS).Get(ctx, name, metav1.GetOptions{})
		return isNotFound(err), fmt.Errorf("pod %s still there (%v)", name, err)
	}); err != nil {
		c.t.Fatal(err)
	}
}

// urlPath is the path part of an extenders entry's urlPrefix ("https://host:port/scheduler" ->
// "/scheduler").
func urlPath(t testing.TB, ext map[string]any) string {
	prefix, _ := ext["urlPrefix"].(string)
	return urlPathOf(t, prefix)
}

// urlPathOf is the path of a URL ("http://host:port/volcano" -> "/volcano").
func urlPathOf(t testing.TB, u string) string {
	i := strings.Index(u, "://")
	if i < 0 {
		t.Fatalf("%q is not a URL", u)
	}
	j := strings.Index(u[i+3:], "/")
	if j < 0 {
		t.Fatalf("%q has no path", u)
	}
	return u[i+3+j:]
}

func (c *cluster) startScheduler() string {
	kc := c.cp.ServiceAccountKubeconfig(c.t, c.out, c.ns, c.schedSA)
	cfg, name := c.schedulerConfig(kc)
	harness.Start(c.t, c.out, "kube-scheduler", nil, c.peers.Scheduler,
		"--config", cfg, "--bind-address", "127.0.0.1", "--secure-port", strconv.Itoa(harness.FreePort(c.t)),
		"--v", "2")
	return name
}

func isNotFound(err error) bool { return apierrors.IsNotFound(err) }

// dropNulls removes null members of JSON objects, recursively.
func dropNulls(v any) any {
	switch x := v.(type) {
	case map[string]any:
		out := map[string]any{}
		for k, e := range x {
			if e != nil {
				out[k] = dropNulls(e)
			}
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = dropNulls(e)
		}
		return out
	}
	return v
}
