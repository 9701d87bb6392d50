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
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"

	"toposched.io/e2e/harness"
)

// TestKubeSchedulerBindIsOneWrite: a bind through the real kube-scheduler v1.37.2 and
// kube-apiserver v1.37.2 is one write, the Binding, and it carries the allocation annotations:
// the API server merges a Binding's metadata.annotations into the pod in the same update that
// sets spec.nodeName (pkg/registry/core/pod/storage/storage.go, setPodNodeAndMetadata), so a
// watch of the pods never shows a pod with a node but no allocation, or an allocation but no
// node. And a Binding the API server refuses (the pod was deleted and created again under the
// same name between filter and bind, so the Binding's UID precondition fails) leaves the new pod
// with no annotation and the extender with no allocation.
func TestKubeSchedulerBindIsOneWrite(t *testing.T) {
	c := newCluster(t, "TestKubeSchedulerBindIsOneWrite")
	c.addNodes([]*gpuNode{
		{Name: "gpu-azure-a", File: "azure__nd-a100-v4_8xA100_8xCX6.nccl.xml", Labels: map[string]string{"toposched.io/leaf": "leaf-1", "toposched.io/spine": "spine-1"}},
		{Name: "gpu-azure-b", File: "azure__nd-a100-v4_8xA100_8xCX6.nccl.xml", Labels: map[string]string{"toposched.io/leaf": "leaf-1", "toposched.io/spine": "spine-1"}},
	})
	r, schedulerName := c.startLeaderAndScheduler("-e2e-onewrite")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	pods := c.cp.Admin.CoreV1().Pods(workloadNS)
	w, err := pods.Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()

	specs := []podSpec{
		{name: "one-write-0", gpus: 2, rdmaRes: 2, node: "gpu-azure-a", fits: true},
		{name: "one-write-1", gpus: 4, rdmaRes: 4, node: "gpu-azure-a", fits: true},
		{name: "one-write-2", gpus: 1, node: "gpu-azure-a", fits: true},
		{name: "one-write-3", gpus: 1, rdmaAnnot: "1", node: "gpu-azure-a", fits: true},
		{name: "one-write-4", gpus: 8, rdmaRes: 8, node: "gpu-azure-b", fits: true},
	}
	for _, p := range specs {
		c.createPod(schedulerName, p)
	}
	c.waitBound(specs, 90*time.Second)
	// Every event of the watch until each pod has shown its node: one write per event.
	bound := map[string]bool{}
	for len(bound) < len(specs) {
		var ev watch.Event
		select {
		case ev = <-w.ResultChan():
		case <-ctx.Done():
			t.Fatalf("watch: %d of %d pods seen bound", len(bound), len(specs))
		}
		pod, ok := ev.Object.(*corev1.Pod)
		if !ok {
			t.Fatalf("watch event %s: %T", ev.Type, ev.Object)
		}
		allocation := pod.Annotations["toposched.io/allocation"]
		switch {
		case pod.Spec.NodeName != "" && allocation == "":
			t.Errorf("%s (resourceVersion %s): bound to %s by a write without the allocation", pod.Name, pod.ResourceVersion, pod.Spec.NodeName)
		case pod.Spec.NodeName == "" && allocation != "":
			t.Errorf("%s (resourceVersion %s): allocation written while the pod had no node", pod.Name, pod.ResourceVersion)
		case pod.Spec.NodeName != "" && !bound[pod.Name]:
			bound[pod.Name] = true
			var a allocationRecord
			if err := json.Unmarshal([]byte(allocation), &a); err != nil || a.Node != pod.Spec.NodeName {
				t.Errorf("%s: bound to %s with allocation %q (%v)", pod.Name, pod.Spec.NodeName, allocation, err)
			}
			for _, k := range []string{"toposched.io/visible-gpus", "toposched.io/nccl-ib-hca", "toposched.io/bind-time"} {
				if _, ok := pod.Annotations[k]; !ok {
					t.Errorf("%s: the Binding's write lacks %s", pod.Name, k)
				}
			}
		}
	}
	c.assertPlacements(specs)
	if sum, _, err := c.metricSum(r.port, `toposched_kube_annotation_writes_total{outcome="binding"}`); err != nil || sum < float64(len(specs)) {
		t.Errorf("toposched_kube_annotation_writes_total{outcome=\"binding\"} = %v (%v), want at least %d", sum, err, len(specs))
	}
	if sum, _, _ := c.metricSum(r.port, `toposched_kube_annotation_writes_total{outcome="bind"}`); sum != 0 {
		t.Errorf("%v annotation patches by kube-scheduler's binds, want none: the Binding carries them", sum)
	}

	t.Run("RefusedBindingLeavesNothing", func(t *testing.T) {
		defer c.as(t)()
		c.checkRefusedBinding(t, r)
	})
}

// allocationRecord is the part of toposched.io/allocation these tests read.
type allocationRecord struct {
	Node string `json:"node"`
}

// checkRefusedBinding: filter a pod through the leader as kube-scheduler would, delete it and
// create it again under the same name (a new UID), then bind the old UID: the API server refuses
// the Binding (UID precondition), and nothing of the bind remains.
func (c *cluster) checkRefusedBinding(t *testing.T, r *replica) {
	ctx := context.Background()
	pods := c.cp.Admin.CoreV1().Pods(workloadNS)
	// A scheduler name nobody serves: only this test binds it.
	spec := podSpec{name: "recreated", gpus: 8, rdmaRes: 8}
	first, err := pods.Create(ctx, c.podObject("nobody", spec), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// The 8-GPU pod of the parent test leaves: its node is whole again.
	node := c.nodeOf("one-write-4")
	c.deletePod("one-write-4")
	if err := harness.Eventually(30*time.Second, 100*time.Millisecond, func() (bool, error) {
		free := c.freeGpus(t, r)
		return free[node] == 8, fmt.Errorf("free GPUs: %v", free)
	}); err != nil {
		t.Fatalf("node %s not whole again after its pod left: %v", node, err)
	}
	var filtered extenderv1.ExtenderFilterResult
	c.postVerb(t, r, "filter", extenderv1.ExtenderArgs{Pod: first, NodeNames: &[]string{node}}, &filtered)
	if filtered.NodeNames == nil || len(*filtered.NodeNames) != 1 {
		t.Fatalf("filter of %s on %s: %+v", spec.name, node, filtered)
	}
	c.deletePod(spec.name)
	second, err := pods.Create(ctx, c.podObject("nobody", spec), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var result extenderv1.ExtenderBindingResult
	c.postVerb(t, r, "bind", extenderv1.ExtenderBindingArgs{PodName: spec.name, PodNamespace: workloadNS,
		PodUID: first.UID, Node: node}, &result)
	if result.Error == "" {
		t.Fatalf("bind of the deleted pod's UID %s succeeded", first.UID)
	}
	t.Logf("bind of the old UID: %q", result.Error)
	now, err := pods.Get(ctx, spec.name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if now.UID != second.UID || now.Spec.NodeName != "" {
		t.Errorf("the new pod (UID %s) is %s on node %q", second.UID, now.UID, now.Spec.NodeName)
	}
	for k := range now.Annotations {
		if strings.HasPrefix(k, "toposched.io/") || strings.HasPrefix(k, "hami.io/") {
			t.Errorf("the new pod carries %s=%q", k, now.Annotations[k])
		}
	}
	if got := c.freeGpus(t, r)[node]; got != 8 {
		t.Errorf("node %s has %d free GPUs after the refused Binding, want all 8", node, got)
	}
	c.deletePod(spec.name)
}

// verbClient is an HTTP client to the replicas as the chart's kube-scheduler is (its client
// certificate when the chart serves mutual TLS).
func (c *cluster) verbClient(t *testing.T) *http.Client {
	if c.tls == nil {
		return &http.Client{Timeout: 10 * time.Second}
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(c.tls.CA)
	cfg := &tls.Config{RootCAs: pool, ServerName: c.tls.ServerName}
	if len(c.tls.ClientCert) > 0 {
		cert, err := tls.X509KeyPair(c.tls.ClientCert, c.tls.ClientKey)
		if err != nil {
			t.Fatal(err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg}}
}

// postVerb POSTs `in` to the replica's kube-scheduler verb and decodes the 200 reply into out.
func (c *cluster) postVerb(t *testing.T, r *replica, verb string, in, out any) {
	body, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := c.verbClient(t).Post(c.replicaURL(r.port, urlPath(t, c.chartExtender())+"/"+verb), "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatalf("POST %s: %v", verb, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("POST %s: %d %s", verb, resp.StatusCode, b)
	}
	if err := json.Unmarshal(b, out); err != nil {
		t.Fatalf("POST %s: %v in %s", verb, err, b)
	}
}

// freeGpus is each node's free GPUs in the replica's state (GET /nodes).
func (c *cluster) freeGpus(t *testing.T, r *replica) map[string]int {
	out := map[string]int{}
	for name, free := range c.freeDevices(t, r) {
		out[name] = free[0]
	}
	return out
}
