package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/yaml"

	"toposched.io/e2e/harness"
)

// Volcano v1.13.3 from its upstream source tree (../shared/peers; the module proxy refuses
// volcano.sh/volcano), built by e2e/build-peers.sh volcano, installed by the real helm from its
// own chart, upgraded as docs/install.md tells an operator, and run as processes with the
// ServiceAccounts and arguments its chart gives its Deployments.

const (
	volcanoNS      = "volcano-system"
	volcanoRelease = "volcano"
	volcanoTag     = "v1.13.3"
)

var (
	podGroupGVR  = schema.GroupVersionResource{Group: "scheduling.volcano.sh", Version: "v1beta1", Resource: "podgroups"}
	queueGVR     = schema.GroupVersionResource{Group: "scheduling.volcano.sh", Version: "v1beta1", Resource: "queues"}
	hyperNodeGVR = schema.GroupVersionResource{Group: "topology.volcano.sh", Version: "v1alpha1", Resource: "hypernodes"}
	vcJobGVR     = schema.GroupVersionResource{Group: "batch.volcano.sh", Version: "v1alpha1", Resource: "jobs"}
	crdGVR       = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
)

// volcano is Volcano's control plane in one scenario.
type volcano struct {
	c        *cluster
	src      string // the upstream source tree
	chart    string // its chart, installer/helm/chart/volcano
	bin      string // the built binaries
	confPath string // vc-scheduler's --scheduler-conf, as Volcano's ConfigMap holds it but the extender's address
	// schedulerName is the name vc-scheduler schedules for (its Deployment's --scheduler-name, else volcano).
	schedulerName string
	sched, ctrl   *harness.Proc
	// editConf, when set, edits the rendered volcano-scheduler.conf before it is given to
	// Volcano's chart (an operator merging a plugin of their own).
	editConf func(string) string
	// extraEnv is added to every Volcano process's environment.
	extraEnv []string
}

// sharedPeersDir is $TOPOSCHED_SHARED_PEERS, else ../shared/peers next to the repository.
func sharedPeersDir() string {
	if d := os.Getenv("TOPOSCHED_SHARED_PEERS"); d != "" {
		return d
	}
	return filepath.Join(filepath.Dir(harness.RepoRoot()), "shared", "peers")
}

// findVolcano locates the source tree (the test is skipped, saying so, without it) and the
// binaries built from it (a missing one fails with the command that builds it).
func findVolcano(t *testing.T) *volcano {
	t.Helper()
	v := &volcano{src: filepath.Join(sharedPeersDir(), "volcano-"+volcanoTag)}
	if _, err := os.Stat(filepath.Join(v.src, "go.mod")); err != nil {
		t.Skipf("Volcano's source tree not found at %s (set TOPOSCHED_SHARED_PEERS): skipping", v.src)
	}
	v.chart = filepath.Join(v.src, "installer", "helm", "chart", "volcano")
	v.bin = filepath.Join(harness.CacheDir(), "volcano-"+volcanoTag)
	for _, b := range []string{"vc-scheduler", "vc-controller-manager"} {
		if _, err := os.Stat(filepath.Join(v.bin, b)); err != nil {
			t.Fatalf("Volcano %s is not built in %s: run e2e/build-peers.sh volcano (or e2e/run.sh)", b, v.bin)
		}
	}
	return v
}

// newVolcanoCluster: Volcano installed by helm from its chart with its admission webhooks off
// through the chart's own value (no Service routing here reaches a webhook server; see
// docs/install.md for what an operator loses without them), then toposched's chart in volcano
// mode, then Volcano upgraded with the scheduler configuration toposched's chart renders,
// exactly as docs/install.md says.
func newVolcanoCluster(t *testing.T, name string, toposchedArgs ...string) (*cluster, *volcano) {
	return newVolcanoClusterWith(t, findVolcano(t), name, toposchedArgs...)
}

func newVolcanoClusterWith(t *testing.T, v *volcano, name string, toposchedArgs ...string) (*cluster, *volcano) {
	args := append([]string{"--set", "schedulerMode=volcano"}, toposchedArgs...)
	c := newClusterWith(t, name, func(c *cluster) {
		helm := harness.NewHelm(t, c.peers.Helm, c.cp.AdminKubeconfig)
		if _, err := helm.Run(context.Background(), 3*time.Minute, "install", volcanoRelease, v.chart,
			"--namespace", volcanoNS, "--create-namespace", "--timeout", "2m",
			"--set", "custom.admission_enable=false"); err != nil {
			t.Fatalf("helm install volcano from %s: %v", v.chart, err)
		}
	}, args...)
	c.volcano = true
	v.c = c
	v.upgradeWithToposchedConf()
	return c, v
}

// upgradeWithToposchedConf: docs/install.md, "schedulerMode volcano": the file toposched's chart
// renders, given whole to Volcano's chart as custom.scheduler_config_override.
func (v *volcano) upgradeWithToposchedConf() {
	c, t := v.c, v.c.t
	ctx := context.Background()
	var conf string
	for _, cm := range c.cms {
		if s, ok := cm.Data["volcano-scheduler.conf"]; ok {
			conf = s
		}
	}
	if conf == "" {
		t.Fatal("toposched's chart in volcano mode installed no ConfigMap with volcano-scheduler.conf")
	}
	if v.editConf != nil {
		conf = v.editConf(conf)
	}
	file := filepath.Join(c.out, "volcano-scheduler.conf")
	if err := os.WriteFile(file, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	helm := harness.NewHelm(t, c.peers.Helm, c.cp.AdminKubeconfig)
	if _, err := helm.Run(ctx, 3*time.Minute, "upgrade", volcanoRelease, v.chart, "-n", volcanoNS, "--reuse-values",
		"--set-file", "custom.scheduler_config_override="+file); err != nil {
		t.Fatalf("helm upgrade volcano --set-file custom.scheduler_config_override: %v", err)
	}
	cm, err := c.cp.Admin.CoreV1().ConfigMaps(volcanoNS).Get(ctx, volcanoRelease+"-scheduler-configmap", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("Volcano's scheduler ConfigMap: %v", err)
	}
	if got := cm.Data["volcano-scheduler.conf"]; strings.TrimSpace(got) != strings.TrimSpace(conf) {
		t.Fatalf("after the upgrade Volcano's ConfigMap holds a volcano-scheduler.conf other than toposched's:\n%s", got)
	}
	v.checkExtenderKeys(conf)
}

// checkExtenderKeys: every extender.* key the rendered configuration sets is one Volcano's
// extender plugin reads (the constants of pkg/scheduler/plugins/extender/extender.go in the
// tree that was built), of the type it reads, and names a verb.
func (v *volcano) checkExtenderKeys(conf string) {
	t := v.c.t
	src, err := os.ReadFile(filepath.Join(v.src, "pkg", "scheduler", "plugins", "extender", "extender.go"))
	if err != nil {
		t.Fatal(err)
	}
	known := map[string]bool{}
	for _, m := range regexp.MustCompile(`=\s*"(extender\.[A-Za-z]+)"`).FindAllStringSubmatch(string(src), -1) {
		known[m[1]] = true
	}
	if len(known) < 10 {
		t.Fatalf("read only %d extender keys from Volcano's extender.go: %v", len(known), known)
	}
	args := extenderArguments(t, conf)
	for k, val := range args {
		if !known[k] {
			t.Errorf("the chart's volcano-scheduler.conf sets %s, which Volcano %s's extender plugin does not read (it reads %v)", k, volcanoTag, keys(known))
		}
		switch {
		case k == "extender.ignorable":
			if _, ok := val.(bool); !ok {
				t.Errorf("%s is %T, Volcano reads a YAML boolean (a string only warns and is ignored)", k, val)
			}
		case k == "extender.managedResources":
			l, ok := val.([]any)
			if !ok || len(l) == 0 {
				t.Errorf("%s is %T, Volcano decodes a list of strings (a wrong type is fatal)", k, val)
			}
		case strings.HasSuffix(k, "Verb"):
			if s, _ := val.(string); s == "" || strings.Contains(s, "/") {
				t.Errorf("%s = %v: a verb is one path segment", k, val)
			}
		}
	}
	for _, k := range []string{"extender.urlPrefix", "extender.predicateVerb", "extender.prioritizeVerb", "extender.allocateFuncVerb", "extender.deallocateFuncVerb", "extender.ignorable"} {
		if _, ok := args[k]; !ok {
			t.Errorf("the chart's volcano-scheduler.conf sets no %s", k)
		}
	}
}

func keys(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// extenderArguments are the arguments of the `extender` plugin in a volcano-scheduler.conf.
func extenderArguments(t *testing.T, conf string) map[string]any {
	var cfg struct {
		Tiers []struct {
			Plugins []struct {
				Name      string         `json:"name"`
				Arguments map[string]any `json:"arguments"`
			} `json:"plugins"`
		} `json:"tiers"`
	}
	if err := yaml.Unmarshal([]byte(conf), &cfg); err != nil {
		t.Fatalf("volcano-scheduler.conf: %v", err)
	}
	for _, tier := range cfg.Tiers {
		for _, p := range tier.Plugins {
			if p.Name == "extender" {
				return p.Arguments
			}
		}
	}
	t.Fatal("volcano-scheduler.conf enables no extender plugin")
	return nil
}

// deployment is Volcano's Deployment named name (its chart's).
func (v *volcano) deployment(name string) *appsv1.Deployment {
	d, err := v.c.cp.Admin.AppsV1().Deployments(volcanoNS).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		v.c.t.Fatalf("Volcano's chart installed no Deployment %s/%s: %v", volcanoNS, name, err)
	}
	return d
}

// run starts the container of Volcano's Deployment dep as a process: its args (a file under a
// ConfigMap volume read from the local copy `files` gives), its ServiceAccount's token, and
// local ports for the listeners.
func (v *volcano) run(dep, bin string, files map[string]string) *harness.Proc {
	return v.runAs(dep, dep, bin, files)
}

// runAs is run with the process (and its log) named name.
func (v *volcano) runAs(name, dep, bin string, files map[string]string) *harness.Proc {
	c, t := v.c, v.c.t
	d := v.deployment(dep)
	spec := d.Spec.Template.Spec
	sa := spec.ServiceAccountName
	if sa == "" {
		sa = spec.DeprecatedServiceAccount
	}
	if sa == "" {
		t.Fatalf("Volcano's %s runs as no ServiceAccount", dep)
	}
	kc := filepath.Join(c.out, sa+".kubeconfig")
	if _, err := os.Stat(kc); err != nil {
		kc = c.cp.ServiceAccountKubeconfig(t, c.out, volcanoNS, sa)
	}
	ct := spec.Containers[0]
	var args []string
	for _, a := range ct.Args {
		if k, val, ok := strings.Cut(a, "="); ok {
			if local, ok := files[val]; ok {
				a = k + "=" + local
			}
		}
		args = append(args, a)
	}
	if lv := os.Getenv("TOPOSCHED_E2E_VOLCANO_V"); lv != "" {
		args = append(args, "-v="+lv) // after the chart's -v: the last one counts
	}
	args = append(args, "--kubeconfig", kc,
		"--listen-address", "127.0.0.1:"+strconv.Itoa(harness.FreePort(t)),
		"--healthz-address", "127.0.0.1:"+strconv.Itoa(harness.FreePort(t)))
	env := append([]string(nil), v.extraEnv...)
	for _, e := range ct.Env {
		if e.ValueFrom == nil {
			val := e.Value
			if e.Name == "DEBUG_SOCKET_DIR" {
				val = filepath.Join(c.out, "klog-socks")
			}
			env = append(env, e.Name+"="+val)
		}
	}
	return harness.Start(c.root, c.out, name, env, filepath.Join(v.bin, bin), args...)
}

// start runs vc-controller-manager and vc-scheduler (the extender's replicas and the Service
// stand-in must be up: the configuration points at the stand-in) and waits until the scheduler
// made its default queue.
func (v *volcano) start() {
	v.startController()
	v.startScheduler()
}

func (v *volcano) startController() {
	v.waitCRDsServed()
	v.ctrl = v.run(volcanoRelease+"-controllers", "vc-controller-manager", nil)
}

// waitCRDsServed waits until every Volcano CRD the chart installed is Established and its
// resources answer a list, before vc-controller-manager starts (in a cluster its pod starts
// long after helm created the CRDs). Why it matters: Volcano's job controller handles only
// PodGroup updates (job_controller.go registers no AddFunc for them), so a PodGroup its informer
// first sees already Inqueue (through a list that follows a refused watch) is never synced and
// the Job's pods are never made. A draft of TestVolcanoJob saw that once (a "Got a Retry-After
// response" on the podgroups watch right after start, then no pods); the refusal's cause was
// not reproduced since (TestVolcanoJob passes under load), and an unserved CRD is the one such
// refusal the harness can rule out.
func (v *volcano) waitCRDsServed() {
	c, t := v.c, v.c.t
	ctx := context.Background()
	err := harness.Eventually(60*time.Second, 200*time.Millisecond, func() (bool, error) {
		list, err := c.dyn.Client.Resource(crdGVR).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		seen := 0
		for _, crd := range list.Items {
			group, _, _ := unstructured.NestedString(crd.Object, "spec", "group")
			if !strings.HasSuffix(group, "volcano.sh") {
				continue
			}
			seen++
			conds, _, _ := unstructured.NestedSlice(crd.Object, "status", "conditions")
			established := false
			for _, cond := range conds {
				m, _ := cond.(map[string]any)
				if m["type"] == "Established" && m["status"] == "True" {
					established = true
				}
			}
			if !established {
				return false, fmt.Errorf("CRD %s not Established", crd.GetName())
			}
		}
		if seen == 0 {
			return false, fmt.Errorf("no Volcano CRD installed")
		}
		for _, gvr := range []schema.GroupVersionResource{podGroupGVR, queueGVR, vcJobGVR} {
			if _, err := c.dyn.Client.Resource(gvr).List(ctx, metav1.ListOptions{Limit: 1}); err != nil {
				return false, fmt.Errorf("list %s: %v", gvr.Resource, err)
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("Volcano's CRDs not served: %v", err)
	}
}

// startScheduler writes the configuration Volcano's ConfigMap holds, with the extender's
// address pointed at the Service stand-in (the one line changed), and runs vc-scheduler on it.
func (v *volcano) startScheduler() {
	c, t := v.c, v.c.t
	ctx := context.Background()
	confArg, conf := v.schedulerConf()
	prefix := extenderArguments(t, conf)["extender.urlPrefix"]
	ps, _ := prefix.(string)
	local := strings.Replace(conf, ps, c.proxy.URL+urlPathOf(t, ps), 1)
	// A restart appends to the same log (harness.Start), after a line with the command.
	v.sched = v.run(volcanoRelease+"-scheduler", "vc-scheduler", map[string]string{confArg: v.writeConf(confArg, local)})
	if err := harness.Eventually(90*time.Second, 500*time.Millisecond, func() (bool, error) {
		if ok, err := v.sched.Exited(); ok {
			return false, harness.Permanent(fmt.Errorf("vc-scheduler exited: %v", err))
		}
		_, err := c.dyn.Client.Resource(queueGVR).Get(ctx, "default", metav1.GetOptions{})
		return err == nil, err
	}); err != nil {
		t.Fatalf("vc-scheduler did not come up: %v\n%s", err, v.sched.Tail(4000))
	}
}

// schedulerConf is vc-scheduler's --scheduler-conf path (in the container) and the file as the
// ConfigMap behind it holds it; it also reads the scheduler's name from the Deployment.
func (v *volcano) schedulerConf() (confArg, conf string) {
	c, t := v.c, v.c.t
	d := v.deployment(volcanoRelease + "-scheduler")
	ct := d.Spec.Template.Spec.Containers[0]
	v.schedulerName = "volcano"
	for _, a := range ct.Args {
		if s, ok := strings.CutPrefix(a, "--scheduler-conf="); ok {
			confArg = s
		}
		if s, ok := strings.CutPrefix(a, "--scheduler-name="); ok {
			v.schedulerName = s
		}
	}
	if confArg == "" {
		t.Fatalf("Volcano's scheduler Deployment passes no --scheduler-conf: %v", ct.Args)
	}
	cmName := ""
	for _, vm := range ct.VolumeMounts {
		if strings.HasPrefix(confArg, strings.TrimSuffix(vm.MountPath, "/")+"/") {
			for _, vol := range d.Spec.Template.Spec.Volumes {
				if vol.Name == vm.Name && vol.ConfigMap != nil {
					cmName = vol.ConfigMap.Name
				}
			}
		}
	}
	cm, err := c.cp.Admin.CoreV1().ConfigMaps(volcanoNS).Get(context.Background(), cmName, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the ConfigMap behind --scheduler-conf=%s (%q): %v", confArg, cmName, err)
	}
	return confArg, cm.Data[filepath.Base(confArg)]
}

// writeConf writes conf where the ConfigMap volume would put confArg, in a directory of its own
// as the volume is: vc-scheduler watches the file's directory and reloads on every change in
// it (next to the logs it would reload on each line written). It returns the local path.
func (v *volcano) writeConf(confArg, conf string) string {
	t := v.c.t
	dir := filepath.Join(v.c.out, "mounts", volcanoRelease+"-scheduler", strings.TrimPrefix(filepath.Dir(confArg), "/"))
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	v.confPath = filepath.Join(dir, filepath.Base(confArg))
	if err := os.WriteFile(v.confPath, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	return v.confPath
}

// startToposched runs two extender replicas as the chart deploys them, the Service stand-in,
// and waits for one leader; it returns the leader's pod name.
func (v *volcano) startToposched() string {
	c := v.c
	return c.startReplicas(c.extDep.Name+"-vc-a", c.extDep.Name+"-vc-b")
}

// startReplicas starts two extender replicas as the chart's Deployment runs them, in pods
// podA and podB, and the Service stand-in; it waits until both are ready and one of them leads
// (labelled and holding the Lease), and returns the leader's pod name.
func (c *cluster) startReplicas(podA, podB string) string {
	c.extenderPod(podA)
	c.extenderPod(podB)
	ra := c.startReplica(podA)
	rb := c.startReplica(podB)
	c.startProxy()
	c.waitReady(ra, 90*time.Second)
	c.waitReady(rb, 90*time.Second)
	return c.waitLeader(60 * time.Second)
}

// waitLeader waits until exactly one live replica is labelled leader and holds the Lease.
func (c *cluster) waitLeader(timeout time.Duration) string {
	var leader string
	err := harness.Eventually(timeout, 250*time.Millisecond, func() (bool, error) {
		eps := c.leaderPods()
		if len(eps) != 1 {
			return false, fmt.Errorf("pods labelled leader: %v", eps)
		}
		leader = eps[0]
		return strings.HasPrefix(c.leaseHolder(), leader), fmt.Errorf("lease holder %q, labelled %s", c.leaseHolder(), leader)
	})
	if err != nil {
		var tails strings.Builder
		for name, r := range c.replicas {
			fmt.Fprintf(&tails, "\n--- %s:\n%s", name, r.proc.Tail(3000))
		}
		c.t.Fatalf("no single leader: %v%s", err, tails.String())
	}
	return leader
}

// podGroup creates a PodGroup (scheduling.volcano.sh/v1beta1) in the workload namespace.
func (v *volcano) podGroup(name string, minMember int, queue string) {
	c := v.c
	obj := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup",
		"metadata": map[string]any{"name": name, "namespace": workloadNS},
		"spec":     map[string]any{"minMember": int64(minMember), "queue": queue},
	}}
	if _, err := c.dyn.Client.Resource(podGroupGVR).Namespace(workloadNS).Create(context.Background(), obj, metav1.CreateOptions{}); err != nil {
		c.t.Fatalf("create PodGroup %s: %v", name, err)
	}
}

// createGroupPod creates p as a member of PodGroup group (Volcano's annotation
// scheduling.k8s.io/group-name).
func (v *volcano) createGroupPod(p podSpec, group string) {
	c := v.c
	pod := c.podObject(v.schedulerName, p)
	if pod.Annotations == nil {
		pod.Annotations = map[string]string{}
	}
	pod.Annotations["scheduling.k8s.io/group-name"] = group
	if _, err := c.cp.Admin.CoreV1().Pods(workloadNS).Create(context.Background(), pod, metav1.CreateOptions{}); err != nil {
		c.t.Fatalf("create pod %s: %v", p.name, err)
	}
}

// waitBound is cluster.waitBound with vc-scheduler's log in the failure.
func (v *volcano) waitBound(specs []podSpec, timeout time.Duration) {
	v.c.t.Helper()
	var pending []string
	err := harness.Eventually(timeout, 500*time.Millisecond, func() (bool, error) {
		pending = pending[:0]
		for _, p := range specs {
			if !p.fits {
				continue
			}
			if v.c.nodeOf(p.name) == "" {
				pending = append(pending, p.name)
			}
		}
		return len(pending) == 0, fmt.Errorf("not bound: %s", strings.Join(pending, ", "))
	})
	if err != nil {
		v.c.t.Fatalf("%v\n--- vc-scheduler log tail (%s):\n%s", err, v.sched.LogPath, v.sched.Tail(6000))
	}
}

// deleteOwnedPodGroups deletes the PodGroups in the workload namespace owned by the object uid.
func (c *cluster) deleteOwnedPodGroups(uid string) {
	if uid == "" {
		return
	}
	ctx := context.Background()
	list, err := c.dyn.Client.Resource(podGroupGVR).Namespace(workloadNS).List(ctx, metav1.ListOptions{})
	if err != nil {
		c.t.Fatalf("list PodGroups: %v", err)
	}
	for _, pg := range list.Items {
		for _, o := range pg.GetOwnerReferences() {
			if string(o.UID) == uid {
				if err := c.dyn.Client.Resource(podGroupGVR).Namespace(workloadNS).Delete(ctx, pg.GetName(), metav1.DeleteOptions{}); err != nil && !isNotFound(err) {
					c.t.Fatalf("delete PodGroup %s: %v", pg.GetName(), err)
				}
			}
		}
	}
}

// as makes t the test the cluster's helpers fail (a subtest's), until the returned func restores it.
func (c *cluster) as(t *testing.T) func() {
	parent := c.t
	c.t = t
	return func() { c.t = parent }
}

// annotated is the workload pods that carry toposched.io/allocation, by name -> node ("" unbound).
func (c *cluster) annotated(names []string) map[string]string {
	out := map[string]string{}
	for _, n := range names {
		pod, err := c.cp.Admin.CoreV1().Pods(workloadNS).Get(context.Background(), n, metav1.GetOptions{})
		if err != nil {
			c.t.Fatalf("get pod %s: %v", n, err)
		}
		if _, ok := pod.Annotations["toposched.io/allocation"]; ok {
			out[n] = pod.Spec.NodeName
		}
	}
	return out
}

// podNames are the names of specs.
func podNames(specs []podSpec) []string {
	var out []string
	for _, p := range specs {
		out = append(out, p.name)
	}
	return out
}
