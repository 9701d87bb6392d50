package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"toposched.io/e2e/harness"
)

// Issue 17 (items 1 and 2): what an operator sees of a bound and of an unschedulable pod: the
// extender's events on each, and `kubectl toposched explain` / `nodes` (the plugin script in
// deploy/kubectl-plugin, run with the kubectl built from the pinned k8s.io/kubernetes) through
// the real API server's service proxy, as a ServiceAccount holding only the Role that
// docs/operations.md gives plugin users.

// waitPodEvent waits for an Event on workload/pod with this reason from the extender.
func (c *cluster) waitPodEvent(t *testing.T, pod, reason string, timeout time.Duration) corev1.Event {
	t.Helper()
	var found corev1.Event
	err := harness.Eventually(timeout, 500*time.Millisecond, func() (bool, error) {
		list, err := c.cp.Admin.CoreV1().Events(workloadNS).List(context.Background(), metav1.ListOptions{
			FieldSelector: "involvedObject.name=" + pod + ",reason=" + reason})
		if err != nil {
			return false, err
		}
		for _, e := range list.Items {
			if e.Source.Component == "toposched-extender" {
				found = e
				return true, nil
			}
		}
		return false, fmt.Errorf("no %s event from toposched-extender on %s/%s (%d others)", reason, workloadNS, pod, len(list.Items))
	})
	if err != nil {
		t.Fatal(err)
	}
	return found
}

// hostIPv4 is an address of this machine that is not loopback: the API server's service proxy
// refuses endpoints that are not a pod's IP, and a pod IP may not be loopback.
func hostIPv4() string {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return ""
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && !n.IP.IsLoopback() && !n.IP.IsLinkLocalUnicast() {
			return n.IP.String()
		}
	}
	return ""
}

func (c *cluster) checkEventsAndExplain(t *testing.T, bound, unfit podSpec) {
	ctx := context.Background()
	pod, err := c.cp.Admin.CoreV1().Pods(workloadNS).Get(ctx, bound.name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	node := pod.Spec.NodeName
	var al struct {
		GPUs []struct {
			PCIBusID string `json:"pciBusId"`
		} `json:"gpus"`
		NICs []struct {
			Name string `json:"name"`
		} `json:"nics"`
	}
	if err := json.Unmarshal([]byte(pod.Annotations["toposched.io/allocation"]), &al); err != nil || len(al.GPUs) == 0 {
		t.Fatalf("%s: no readable toposched.io/allocation (%v): %q", bound.name, err, pod.Annotations["toposched.io/allocation"])
	}

	// 1. The bound pod: its node, every GPU's bus id, its NICs, the worst link and whether that
	// was the best the node allows.
	e := c.waitPodEvent(t, bound.name, "DevicesAllocated", 60*time.Second)
	t.Logf("%s: %s %s: %s", bound.name, e.Type, e.Reason, e.Message)
	if e.Type != corev1.EventTypeNormal || !strings.HasPrefix(e.Message, "Bound to node "+node+": GPUs ") {
		t.Errorf("DevicesAllocated on %s: %s %q, want Normal \"Bound to node %s: GPUs ...\"", bound.name, e.Type, e.Message, node)
	}
	for _, g := range al.GPUs {
		if !strings.Contains(e.Message, g.PCIBusID) {
			t.Errorf("DevicesAllocated on %s does not name GPU %s: %q", bound.name, g.PCIBusID, e.Message)
		}
	}
	if len(al.NICs) > 0 {
		if !strings.Contains(e.Message, "RDMA NICs ") || !strings.Contains(e.Message, "worst GPU->NIC link ") ||
			!(strings.Contains(e.Message, "(the best this node allows)") || strings.Contains(e.Message, "(the node allows ")) {
			t.Errorf("DevicesAllocated on %s lacks the NICs, the worst link or whether it was the best: %q", bound.name, e.Message)
		}
	}

	// 2. The unschedulable pod: the reasons counted, as a Warning.
	e = c.waitPodEvent(t, unfit.name, "FailedScheduling", 60*time.Second)
	t.Logf("%s: %s %s (count %d): %s", unfit.name, e.Type, e.Reason, e.Count, e.Message)
	if e.Type != corev1.EventTypeWarning || !strings.HasPrefix(e.Message, "0/") ||
		!strings.Contains(e.Message, "nodes: fewer GPUs or RDMA NICs in all than the pod asks") {
		t.Errorf("FailedScheduling on %s: %s %q, want a Warning \"0/N nodes fit: N nodes: fewer GPUs or RDMA NICs in all than the pod asks\"", unfit.name, e.Type, e.Message)
	}

	// 3. kubectl toposched through the API server's service proxy. The Service needs endpoints
	// (no controller-manager runs here: the test writes the EndpointSlice) whose address is the
	// leader pod's IP, and that address must reach the extender: the pod's IP is set to this
	// machine's address, where the Service stand-in (which routes to the leader) listens too.
	ip := hostIPv4()
	if ip == "" {
		t.Skip("no non-loopback IPv4 address on this machine: the API server's service proxy cannot reach the extender; kubectl toposched not exercised")
	}
	l, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: c.proxy, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(c.proxy.Listener(l)) }() // HTTPS with the chart's TLS, as the extender serves
	t.Cleanup(func() { _ = srv.Close() })
	port := int32(l.Addr().(*net.TCPAddr).Port)
	leaders := c.leaderPods()
	if len(leaders) != 1 {
		t.Fatalf("pods labelled leader: %v", leaders)
	}
	status, _ := json.Marshal(map[string]any{"status": map[string]any{"podIP": ip, "podIPs": []map[string]string{{"ip": ip}}}})
	if _, err := c.cp.Admin.CoreV1().Pods(c.ns).Patch(ctx, leaders[0], types.MergePatchType, status, metav1.PatchOptions{}, "status"); err != nil {
		t.Fatal(err)
	}
	portName := c.extSvc.Spec.Ports[0].Name
	ready := true
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: c.extSvc.Name + "-e2e", Namespace: c.ns, Labels: map[string]string{discoveryv1.LabelServiceName: c.extSvc.Name}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints: []discoveryv1.Endpoint{{Addresses: []string{ip}, Conditions: discoveryv1.EndpointConditions{Ready: &ready},
			TargetRef: &corev1.ObjectReference{Kind: "Pod", Namespace: c.ns, Name: leaders[0]}}},
		Ports: []discoveryv1.EndpointPort{{Name: &portName, Port: &port, Protocol: ptrTo(corev1.ProtocolTCP)}},
	}
	if _, err := c.cp.Admin.DiscoveryV1().EndpointSlices(c.ns).Create(ctx, slice, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	// The plugin user: a ServiceAccount with the Role docs/operations.md gives, nothing else.
	const operator = "toposched-operator"
	if _, err := c.cp.Admin.CoreV1().ServiceAccounts(c.ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: operator}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	svc := c.extSvc.Name
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "toposched-explain", Namespace: c.ns}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"services"}, Verbs: []string{"get", "list"}},
		{APIGroups: []string{""}, Resources: []string{"services/proxy"}, Verbs: []string{"get"},
			ResourceNames: []string{"http:" + svc + ":http", "https:" + svc + ":https"}},
	}}
	if _, err := c.cp.Admin.RbacV1().Roles(c.ns).Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	binding := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "toposched-explain", Namespace: c.ns},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: role.Name},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: operator, Namespace: c.ns}}}
	if _, err := c.cp.Admin.RbacV1().RoleBindings(c.ns).Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	kubeconfig := c.cp.ServiceAccountKubeconfig(t, c.out, c.ns, operator)

	plugin := filepath.Join(harness.RepoRoot(), "deploy", "kubectl-plugin", "kubectl-toposched")
	run := func(args ...string) (string, error) {
		if c.peers.Kubectl == "" {
			return "", fmt.Errorf("no kubectl")
		}
		env := []string{"KUBECTL=" + c.peers.Kubectl}
		return harness.Run(ctx, 60*time.Second, env, plugin, append(args, "--kubeconfig", kubeconfig, "--toposched-namespace", c.ns)...)
	}
	if c.peers.Kubectl == "" {
		t.Log("no kubectl in the kube peer's cache (e2e/build-peers.sh kube builds it): the plugin's calls are made with client-go instead")
		client := harness.ClientFor(t, kubeconfig)
		run = func(args ...string) (string, error) {
			scheme := "http" // the chart names the port after the scheme
			if portName == "https" {
				scheme = "https"
			}
			path := fmt.Sprintf("/api/v1/namespaces/%s/services/%s:%s:%s/proxy/", c.ns, scheme, svc, portName)
			format := "text"
			for i, a := range args {
				if a == "-o" && i+1 < len(args) {
					format = args[i+1]
				}
			}
			if args[0] == "nodes" {
				path += "nodes?format=" + format
			} else {
				path += "explain?pod=" + workloadNS + "/" + args[1] + "&format=" + format
			}
			b, err := client.CoreV1().RESTClient().Get().AbsPath(path).DoRaw(ctx)
			return string(b), err
		}
	}

	// The API server learns of the EndpointSlice through its informer: retry until it routes.
	var out string
	err = harness.Eventually(60*time.Second, time.Second, func() (bool, error) {
		out, err = run("explain", bound.name, "-n", workloadNS)
		return err == nil, fmt.Errorf("%v: %s", err, out)
	})
	if err != nil {
		t.Fatalf("kubectl toposched explain %s: %v", bound.name, err)
	}
	t.Logf("kubectl toposched explain %s:\n%s", bound.name, firstLines(out, 12))
	for _, want := range []string{"Pod " + workloadNS + "/" + bound.name + ": ", "Bound to " + node + ": GPUs ", " nodes fit", "Best node now: "} {
		if !strings.Contains(out, want) {
			t.Errorf("kubectl toposched explain %s: no %q in\n%s", bound.name, want, out)
		}
	}
	out, err = run("explain", unfit.name, "-n", workloadNS, "-o", "json")
	if err != nil {
		t.Fatalf("kubectl toposched explain %s -o json: %v: %s", unfit.name, err, out)
	}
	var ex struct {
		NodesTotal int    `json:"nodesTotal"`
		NodesFit   int    `json:"nodesFit"`
		Summary    string `json:"summary"`
		Best       *string
		Nodes      []struct {
			Name    string `json:"name"`
			Fits    bool   `json:"fits"`
			Summary string `json:"summary"`
		} `json:"nodes"`
	}
	if err := json.Unmarshal([]byte(out), &ex); err != nil {
		t.Fatalf("explain -o json: %v: %s", err, out)
	}
	t.Logf("kubectl toposched explain %s: %s", unfit.name, ex.Summary)
	if ex.NodesFit != 0 || ex.Best != nil || ex.NodesTotal < len(c.nodes) || len(ex.Nodes) != ex.NodesTotal ||
		!strings.Contains(ex.Summary, "fewer GPUs or RDMA NICs in all than the pod asks") {
		t.Errorf("explain %s: %d/%d fit, best %v, %d nodes listed, summary %q; want 0 of at least %d, none, every node, NICs short",
			unfit.name, ex.NodesFit, ex.NodesTotal, ex.Best, len(ex.Nodes), ex.Summary, len(c.nodes))
	}
	for _, n := range ex.Nodes {
		if n.Fits || n.Summary == "" {
			t.Errorf("explain %s: node %s fits=%v summary %q", unfit.name, n.Name, n.Fits, n.Summary)
		}
	}
	out, err = run("nodes")
	if err != nil {
		t.Fatalf("kubectl toposched nodes: %v: %s", err, out)
	}
	t.Logf("kubectl toposched nodes:\n%s", out)
	for _, n := range c.nodes {
		if !strings.Contains(out, n.Name+" ") {
			t.Errorf("kubectl toposched nodes: no line for %s", n.Name)
		}
	}
	if !strings.HasPrefix(out, "NODE ") {
		t.Errorf("kubectl toposched nodes: no header: %q", firstLines(out, 2))
	}

	// Without the Role the API server refuses the proxy (your RBAC is the access control).
	if c.peers.Kubectl != "" {
		plain := c.cp.ServiceAccountKubeconfig(t, c.out, c.ns, c.agentSA)
		env := []string{"KUBECTL=" + c.peers.Kubectl}
		out, err := harness.Run(ctx, 60*time.Second, env, plugin, "nodes", "--kubeconfig", plain, "--toposched-namespace", c.ns, "--service", svc)
		if err == nil || !strings.Contains(strings.ToLower(out), "forbidden") {
			t.Errorf("kubectl toposched nodes as %s (no services/proxy grant): err %v, output %q; want forbidden", c.agentSA, err, out)
		}
	}
}

func ptrTo[T any](v T) *T { return &v }
