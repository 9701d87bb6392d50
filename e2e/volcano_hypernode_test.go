package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"toposched.io/e2e/harness"
)

// TestVolcanoHyperNodes: real HyperNode objects for two tiers (two leaves under one spine), a
// Prefill/Decode PodGroup with networkTopology mode hard and highestTierAllowed 1, and toposched
// reading the same HyperNodes (config.network.hyperNodes, tier 1 = leaf): Volcano's own
// network-topology placement keeps the pool in one leaf, toposched ranks that leaf first for the
// pool's next Decode pod, and a HyperNode change is seen by toposched without a restart.
func TestVolcanoHyperNodes(t *testing.T) {
	values := filepath.Join(t.TempDir(), "hypernodes-values.yaml")
	// Volcano's tier 1 is the leaf switch here, so toposched's first tier is the leaf too.
	if err := os.WriteFile(values, []byte(`config:
  network:
    hyperNodes: true
    tiers:
      - {label: toposched.io/leaf, path: leaf}
      - {label: toposched.io/spine, path: spine}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	c, v := newVolcanoCluster(t, "TestVolcanoHyperNodes", "-f", values)
	const file = "azure__nd-a100-v4_8xA100_8xCX6.nccl.xml"
	c.addNodes([]*gpuNode{{Name: "gpu-a1", File: file}, {Name: "gpu-a2", File: file}, {Name: "gpu-b1", File: file}, {Name: "gpu-b2", File: file}})
	leaves := map[string][]string{"leaf-a": {"gpu-a1", "gpu-a2"}, "leaf-b": {"gpu-b1", "gpu-b2"}}
	v.hyperNode("leaf-a", 1, "Node", leaves["leaf-a"])
	v.hyperNode("leaf-b", 1, "Node", leaves["leaf-b"])
	v.hyperNode("spine", 2, "HyperNode", []string{"leaf-a", "leaf-b"})
	c.startAgents()
	leader := v.startToposched()
	c.cp.EnsureNamespace(t, workloadNS)
	v.start()

	// Room for the pool in each leaf, not in one node: 6 of 8 GPUs taken on a1 and b1.
	blockers := []podSpec{
		{name: "block-a1", gpus: 6, node: "gpu-a1", fits: true},
		{name: "block-b1", gpus: 6, node: "gpu-b1", fits: true},
	}
	for _, p := range blockers {
		c.createPod(v.schedulerName, p)
	}
	v.waitBound(blockers, 2*time.Minute)

	pd := func(role string) map[string]string {
		return map[string]string{"llm-d.ai/role": role, "toposched.io/pool": "pd-h"}
	}
	gang := []podSpec{
		{name: "pdh-prefill-0", gpus: 4, rdmaRes: 4, labels: pd("prefill"), fits: true},
		{name: "pdh-decode-0", gpus: 2, labels: pd("decode"), fits: true},
		{name: "pdh-decode-1", gpus: 2, labels: pd("decode"), fits: true},
	}
	v.podGroupWithTopology("pd-h", len(gang), "hard", 1)
	for _, p := range gang {
		v.createGroupPod(p, "pd-h")
	}
	v.waitBound(gang, 2*time.Minute)
	leafOf := func(node string) string {
		for leaf, nodes := range leaves {
			for _, n := range nodes {
				if n == node {
					return leaf
				}
			}
		}
		return ""
	}
	var used []string
	for _, p := range gang {
		used = append(used, leafOf(c.nodeOf(p.name)))
	}
	if used[0] == "" || used[1] != used[0] || used[2] != used[0] {
		t.Fatalf("the hard-topology gang spans leaves %v (nodes %s, %s, %s)", used, c.nodeOf(gang[0].name), c.nodeOf(gang[1].name), c.nodeOf(gang[2].name))
	}
	inLeaf := used[0]
	t.Logf("the pool landed in %s (Volcano's hard network topology, tier 1)", inLeaf)

	// toposched ranks the pool's next Decode pod by the KV path to its Prefill: through the leaf
	// both read from the HyperNodes, every node of that leaf before every node of the other.
	probe := c.podObject(v.schedulerName, podSpec{name: "pdh-decode-probe", gpus: 1, labels: pd("decode")})
	ranks := func() map[string]float64 {
		return c.explainScores(c.replicas[leader].port, probe)
	}
	scores := ranks()
	other := "leaf-a"
	if inLeaf == "leaf-a" {
		other = "leaf-b"
	}
	compared := 0
	for _, n := range leaves[inLeaf] {
		for _, m := range leaves[other] {
			sn, okN := scores[n]
			sm, okM := scores[m]
			if !okN || !okM {
				continue // a full node is refused, not ranked
			}
			compared++
			if sn <= sm {
				t.Errorf("toposched scores %s (%s, the pool's leaf) %v, not above %s (%s) %v", n, inLeaf, sn, m, other, sm)
			}
		}
	}
	if compared == 0 {
		t.Fatalf("no node of each leaf fits the probe: %v", scores)
	}
	t.Logf("toposched's scores for the pool's next Decode pod: %v", scores)

	// A HyperNode change, no restart: the other leaf's free node joins the pool's leaf, and
	// toposched scores it as the pool's leaf from then on.
	moved := leaves[other][1] // a2 or b2: the node without a blocker
	leaves[inLeaf] = append(leaves[inLeaf], moved)
	leaves[other] = leaves[other][:1]
	v.setHyperNodeMembers(inLeaf, leaves[inLeaf])
	v.setHyperNodeMembers(other, leaves[other])
	stay := leaves[other][0]
	if scores[moved] > scores[stay] {
		t.Fatalf("before the change %s already scores above %s (%v): the change could not show", moved, stay, scores)
	}
	err := harness.Eventually(30*time.Second, 500*time.Millisecond, func() (bool, error) {
		s := ranks()
		return s[moved] > s[stay], fmt.Errorf("%s (moved to %s) scores %v, %s (still in %s) %v", moved, inLeaf, s[moved], stay, other, s[stay])
	})
	if err != nil {
		t.Errorf("toposched did not see the HyperNode change: %v\n%s", err, c.replicas[leader].proc.Tail(3000))
	}
	c.assertPlacements(append(blockers, gang...))
}

// hyperNode creates a HyperNode (topology.volcano.sh/v1alpha1) of tier with exactMatch members
// of memberType (Node or HyperNode).
func (v *volcano) hyperNode(name string, tier int, memberType string, members []string) {
	obj := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "topology.volcano.sh/v1alpha1", "kind": "HyperNode",
		"metadata": map[string]any{"name": name},
		"spec":     map[string]any{"tier": int64(tier), "members": hyperNodeMembers(memberType, members)},
	}}
	if _, err := v.c.dyn.Client.Resource(hyperNodeGVR).Create(context.Background(), obj, metav1.CreateOptions{}); err != nil {
		v.c.t.Fatalf("create HyperNode %s: %v", name, err)
	}
}

func hyperNodeMembers(memberType string, members []string) []any {
	var out []any
	for _, m := range members {
		out = append(out, map[string]any{"type": memberType, "selector": map[string]any{"exactMatch": map[string]any{"name": m}}})
	}
	return out
}

// setHyperNodeMembers replaces a tier-1 HyperNode's Node members.
func (v *volcano) setHyperNodeMembers(name string, nodes []string) {
	ctx := context.Background()
	obj, err := v.c.dyn.Client.Resource(hyperNodeGVR).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		v.c.t.Fatal(err)
	}
	if err := unstructured.SetNestedSlice(obj.Object, hyperNodeMembers("Node", nodes), "spec", "members"); err != nil {
		v.c.t.Fatal(err)
	}
	if _, err := v.c.dyn.Client.Resource(hyperNodeGVR).Update(ctx, obj, metav1.UpdateOptions{}); err != nil {
		v.c.t.Fatalf("update HyperNode %s: %v", name, err)
	}
}

// podGroupWithTopology is podGroup with spec.networkTopology {mode, highestTierAllowed}.
func (v *volcano) podGroupWithTopology(name string, minMember int, mode string, highestTier int) {
	obj := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup",
		"metadata": map[string]any{"name": name, "namespace": workloadNS},
		"spec": map[string]any{"minMember": int64(minMember), "queue": "default",
			"networkTopology": map[string]any{"mode": mode, "highestTierAllowed": int64(highestTier)}},
	}}
	if _, err := v.c.dyn.Client.Resource(podGroupGVR).Namespace(workloadNS).Create(context.Background(), obj, metav1.CreateOptions{}); err != nil {
		v.c.t.Fatalf("create PodGroup %s: %v", name, err)
	}
}

// explainScores POSTs pod to a replica's /explain and returns each fitting node's score (0-100).
func (c *cluster) explainScores(port int, pod any) map[string]float64 {
	body, err := json.Marshal(pod)
	if err != nil {
		c.t.Fatal(err)
	}
	resp, err := c.replicaHTTP.Post(c.replicaURL(port, "/explain"), "application/json", bytes.NewReader(body))
	if err != nil {
		c.t.Fatalf("POST /explain: %v", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	if resp.StatusCode != 200 {
		c.t.Fatalf("POST /explain: %d %s", resp.StatusCode, b)
	}
	var ex struct {
		Nodes []struct {
			Name        string   `json:"name"`
			Score       *float64 `json:"score"`
			Explanation any      `json:"explanation"`
		} `json:"nodes"`
	}
	if err := json.Unmarshal(b, &ex); err != nil {
		c.t.Fatalf("/explain: %v: %.300s", err, b)
	}
	out := map[string]float64{}
	for _, n := range ex.Nodes {
		if n.Score != nil && !strings.HasPrefix(n.Name, "system-") {
			out[n.Name] = *n.Score
		}
	}
	_ = os.WriteFile(filepath.Join(c.out, "explain-"+time.Now().Format("150405.000")+".json"), b, 0o644)
	return out
}
