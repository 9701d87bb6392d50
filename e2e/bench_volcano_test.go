package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"toposched.io/e2e/harness"
)

// TestBenchVolcano measures the real vc-scheduler v1.13.3 over kwok nodes (as
// TestBenchKubeScheduler measures kube-scheduler) with the configuration toposched's chart
// renders and with the same configuration without its `extender` plugin, for single pods
// (a PodGroup of one each) and for gangs (PodGroups of 4 pods, minMember 4):
//
//   - pods placed per second: N pods (1 nvidia.com/gpu each) and their PodGroups are created
//     while no vc-scheduler runs; it is then started, and the rate is (N-1) / (last bind -
//     first bind), binds seen on a watch (start-up and informer sync not counted);
//   - bind-to-Running latency per pod (kwok marks pods Running), median and p99 per run;
//   - the extender's own mean time per Volcano verb over all the extender runs.
//
// The PodGroups are made by the test, as vc-controller-manager would make them (its 50
// requests/s would pace the single pods), with no minResources; vc-controller-manager runs for
// the rest of its work (the queues' state). The extender plugin is
// called directly at the replica (no Service stand-in in the path), plain HTTP as volcano mode
// serves. Every figure is the median over TOPOSCHED_E2E_BENCH_RUNS runs (rounds interleave the
// four configurations). Not part of the normal suite: set TOPOSCHED_E2E_BENCH=1.
func TestBenchVolcano(t *testing.T) {
	if os.Getenv("TOPOSCHED_E2E_BENCH") != "1" {
		t.Skip("benchmark: run it with TOPOSCHED_E2E_BENCH=1 e2e/run.sh -run BenchVolcano -v " +
			"(TOPOSCHED_E2E_BENCH_NODES=500,1000 TOPOSCHED_E2E_BENCH_PODS=1000 TOPOSCHED_E2E_BENCH_RUNS=3; TOPOSCHED_E2E_TIMEOUT=60m)")
	}
	findVolcano(t)
	nodeCounts := benchEnvInts(t, "TOPOSCHED_E2E_BENCH_NODES", []int{500})
	pods := benchEnvInts(t, "TOPOSCHED_E2E_BENCH_PODS", []int{1000})[0]
	runs := benchEnvInts(t, "TOPOSCHED_E2E_BENCH_RUNS", []int{3})[0]
	if pods%volcanoBenchGang != 0 {
		t.Fatalf("TOPOSCHED_E2E_BENCH_PODS=%d: want a multiple of the gang size %d", pods, volcanoBenchGang)
	}
	var table strings.Builder
	fmt.Fprintf(&table, "%d pods (1 nvidia.com/gpu each) per run, %d runs per row; medians over the runs (min-max in brackets)\n\n", pods, runs)
	table.WriteString("| nodes | pods | configuration | pods/s | bind->Running p50 (ms) | bind->Running p99 (ms) |\n")
	table.WriteString("| ---: | --- | --- | ---: | ---: | ---: |\n")
	var verbs strings.Builder
	verbs.WriteString("| nodes | extender's own mean time per call, all extender runs (toposched_request_duration_seconds sum/count) |\n| ---: | --- |\n")
	for _, n := range nodeCounts {
		t.Run(fmt.Sprintf("nodes=%d", n), func(t *testing.T) {
			c, v := newVolcanoCluster(t, fmt.Sprintf("BenchVolcano-%d", n))
			b := newBenchOn(t, c, n, pods)
			// vc-controller-manager opens the queues (vc-scheduler allocates nothing in a queue
			// without status.state Open); the pods name their PodGroups, so it makes none.
			v.startController()
			results := map[string][]benchResult{}
			for round := 0; round < runs; round++ {
				for _, vr := range volcanoBenchVariants {
					r := v.benchRun(b, vr, round)
					t.Logf("nodes=%d %s round %d: %.1f pods/s, bind->Running p50 %.0f ms p99 %.0f ms",
						n, vr.key, round, r.podsPerSec, r.p50*1000, r.p99*1000)
					results[vr.key] = append(results[vr.key], r)
					b.deletePods()
					v.deletePodGroups()
				}
			}
			for _, vr := range volcanoBenchVariants {
				var rate, p50, p99 []float64
				for _, r := range results[vr.key] {
					rate = append(rate, r.podsPerSec)
					p50 = append(p50, r.p50*1000)
					p99 = append(p99, r.p99*1000)
				}
				fmt.Fprintf(&table, "| %d | %s | %s | %s | %s | %s |\n", n, vr.pods, vr.name,
					medRange(rate, "%.1f"), medRange(p50, "%.0f"), medRange(p99, "%.0f"))
			}
			fmt.Fprintf(&verbs, "| %d | %s |\n", n, b.verbMeans("volcano/predicate", "volcano/prioritize", "volcano/allocate", "volcano/deallocate", "volcano/onSessionClose"))
		})
	}
	text := table.String() + "\n" + verbs.String()
	t.Logf("results:\n%s", text)
	_ = os.WriteFile(filepath.Join(harness.E2EDir(), "_output", "BenchVolcano-results.md"), []byte(text), 0o644)
}

const volcanoBenchGang = 4

type volcanoBenchVariant struct {
	key, name, pods string
	extender        bool
	gang            int // pods per PodGroup (minMember)
}

// The chart's configuration comes last in each pair.
var volcanoBenchVariants = []volcanoBenchVariant{
	{key: "single-plain", name: "vc-scheduler only", pods: "single", gang: 1},
	{key: "single-ext", name: "with toposched (chart)", pods: "single", gang: 1, extender: true},
	{key: "gang-plain", name: "vc-scheduler only", pods: fmt.Sprintf("gangs of %d", volcanoBenchGang), gang: volcanoBenchGang},
	{key: "gang-ext", name: "with toposched (chart)", pods: fmt.Sprintf("gangs of %d", volcanoBenchGang), gang: volcanoBenchGang, extender: true},
}

// benchRun creates the PodGroups and pods of variant vr, then measures vc-scheduler on them
// with the chart's configuration (the extender's address pointed at b's replica) or without its
// extender plugin.
func (v *volcano) benchRun(b *bench, vr volcanoBenchVariant, round int) benchResult {
	t, c := b.t, b.c
	if vr.extender {
		b.heartbeat()
	}
	confArg, conf := v.schedulerConf()
	var cfg map[string]any
	if err := yaml.Unmarshal([]byte(conf), &cfg); err != nil {
		t.Fatal(err)
	}
	tiers, _ := cfg["tiers"].([]any)
	found := false
	for _, tier := range tiers {
		tm, _ := tier.(map[string]any)
		plugins, _ := tm["plugins"].([]any)
		var keep []any
		for _, p := range plugins {
			pm, _ := p.(map[string]any)
			if pm["name"] != "extender" {
				keep = append(keep, p)
				continue
			}
			found = true
			if vr.extender {
				args, _ := pm["arguments"].(map[string]any)
				prefix, _ := args["extender.urlPrefix"].(string)
				args["extender.urlPrefix"] = fmt.Sprintf("http://127.0.0.1:%d%s", b.r.port, urlPathOf(t, prefix))
				keep = append(keep, p)
			}
		}
		tm["plugins"] = keep
	}
	if !found {
		t.Fatal("the chart's volcano-scheduler.conf has no extender plugin")
	}
	out, err := yaml.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	path := v.writeConf(confArg, string(out))

	names := make([]string, b.pods)
	for i := range names {
		names[i] = fmt.Sprintf("v%d-%s-%05d", round, vr.key, i)
	}
	groups := b.pods / vr.gang
	parallel(t, groups, func(g int) error {
		obj := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup",
			"metadata": map[string]any{"name": fmt.Sprintf("pg-%s", names[g*vr.gang]), "namespace": workloadNS},
			"spec":     map[string]any{"minMember": int64(vr.gang), "queue": "default"},
		}}
		_, err := c.dyn.Client.Resource(podGroupGVR).Namespace(workloadNS).Create(context.Background(), obj, metav1.CreateOptions{})
		return err
	})
	b.createPods(v.schedulerName, names, func(i int) map[string]string {
		return map[string]string{"scheduling.k8s.io/group-name": fmt.Sprintf("pg-%s", names[(i/vr.gang)*vr.gang])}
	})
	label := fmt.Sprintf("%s round %d", vr.key, round)
	return b.measure(label, func() *harness.Proc {
		return v.runAs(fmt.Sprintf("vc-scheduler-%s-%d", vr.key, round), volcanoRelease+"-scheduler", "vc-scheduler",
			map[string]string{confArg: path})
	})
}

// deletePodGroups deletes every PodGroup in the workload namespace and waits until they are gone.
func (v *volcano) deletePodGroups() {
	ctx := context.Background()
	res := v.c.dyn.Client.Resource(podGroupGVR).Namespace(workloadNS)
	if err := res.DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
		v.c.t.Fatal(err)
	}
	err := harness.Eventually(2*time.Minute, 500*time.Millisecond, func() (bool, error) {
		l, err := res.List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		return len(l.Items) == 0, fmt.Errorf("%d PodGroups left", len(l.Items))
	})
	if err != nil {
		v.c.t.Fatal(err)
	}
}
