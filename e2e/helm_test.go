package e2e

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	"toposched.io/e2e/harness"
)

const helmNamespace = "toposched-system"

// valueSets are the chart's defaults plus every charts/toposched/ci/*.yaml.
func valueSets(t *testing.T) map[string][]string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(harness.ChartDir(), "ci", "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatalf("no values files in %s", filepath.Join(harness.ChartDir(), "ci"))
	}
	sets := map[string][]string{"defaults": nil}
	for _, f := range files {
		sets[strings.TrimSuffix(filepath.Base(f), ".yaml")] = []string{"--values", f}
	}
	return sets
}

// TestHelm: helm lint and helm template of charts/toposched with the defaults and every
// ci/*.yaml; server-side validation (dry-run, strict field validation) of every rendered
// object against the real kube-apiserver, the chart's ServiceMonitor and PrometheusRule
// against the Prometheus Operator's own CRDs (installed first); then helm install, upgrade and
// uninstall.
func TestHelm(t *testing.T) {
	peers := harness.FindPeers(t)
	out := harness.OutputDir(t, "TestHelm")
	cp := harness.StartControlPlane(t, peers, out)
	ctx := context.Background()
	helm := harness.NewHelm(t, peers.Helm, cp.AdminKubeconfig)
	chart := harness.ChartDir()
	kubeVersion := strings.TrimPrefix(peers.Versions["kube"], "v")

	sets := valueSets(t)
	names := make([]string, 0, len(sets))
	for n := range sets {
		names = append(names, n)
	}
	sort.Strings(names)

	// 1. lint, strict: warnings fail too.
	for _, n := range names {
		args := append([]string{"lint", "--strict", chart, "--namespace", helmNamespace, "--kube-version", kubeVersion}, sets[n]...)
		if o, err := helm.Run(ctx, time.Minute, args...); err != nil {
			t.Errorf("lint %s: %v", n, err)
		} else if !strings.Contains(o, "0 chart(s) failed") {
			t.Errorf("lint %s: unexpected output:\n%s", n, o)
		}
	}

	// 2. the CRD and namespace the rendered objects need, then template + server-side
	// validation of every object of every value set.
	crdPath := filepath.Join(chart, "crds", "toposched.io_nodetopologies.yaml")
	crdText, err := os.ReadFile(crdPath)
	if err != nil {
		t.Fatal(err)
	}
	crds, err := harness.ParseObjects(string(crdText))
	if err != nil || len(crds) != 1 {
		t.Fatalf("%s: want one CRD, got %d (%v)", crdPath, len(crds), err)
	}
	dyn := cp.NewDynamic()
	if err := dyn.ValidateServerSide(ctx, crds[0], ""); err != nil {
		t.Errorf("CRD %s does not validate server-side: %v", crds[0].GetName(), err)
	}
	cp.EnsureNamespace(t, helmNamespace)
	crdClient := dyn.Client.Resource(schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"})
	installMonitoringCRDs(t, ctx, dyn, crdClient, peers.MonitoringCRDs)

	rendered := map[string][]*unstructured.Unstructured{}
	for _, n := range names {
		args := append([]string{"template", "toposched", chart, "--namespace", helmNamespace, "--kube-version", kubeVersion}, sets[n]...)
		o, err := helm.Run(ctx, time.Minute, args...)
		if err != nil {
			t.Errorf("template %s: %v", n, err)
			continue
		}
		if err := os.WriteFile(filepath.Join(out, "template-"+n+".yaml"), []byte(o), 0o644); err != nil {
			t.Fatal(err)
		}
		objs, err := harness.ParseObjects(o)
		if err != nil {
			t.Errorf("template %s: output does not parse: %v", n, err)
			continue
		}
		if len(objs) == 0 {
			t.Errorf("template %s: no objects", n)
		}
		rendered[n] = objs
	}
	// The CRD must be served before its objects (none rendered today) or anything else can be
	// checked against it; install it for real through helm below. Validate the rest now: every
	// kind, the Prometheus Operator's included.
	validated := 0
	for _, n := range names {
		for _, obj := range rendered[n] {
			if err := dyn.ValidateServerSide(ctx, obj, helmNamespace); err != nil {
				t.Errorf("%s: %s rejected by kube-apiserver: %v", n, harness.ObjectKey(obj), err)
				continue
			}
			validated++
		}
	}
	t.Logf("%d rendered objects over %d value sets validated server-side", validated, len(names))

	// 3. install with the defaults.
	release := "toposched"
	if o, err := helm.Run(ctx, 3*time.Minute, "install", release, chart, "--namespace", helmNamespace, "--create-namespace", "--timeout", "2m"); err != nil {
		t.Fatalf("install: %v", err)
	} else {
		t.Logf("helm install:\n%s", firstLines(o, 8))
	}
	if err := waitEstablished(ctx, crdClient, crds[0].GetName()); err != nil {
		t.Errorf("CRD %s not Established after install: %v", crds[0].GetName(), err)
	}
	defaults := rendered["defaults"]
	if len(defaults) == 0 {
		t.Fatal("no rendered default objects to compare the install with")
	}
	for _, obj := range defaults {
		if _, err := dyn.Get(ctx, obj, helmNamespace); err != nil {
			t.Errorf("after install: %s: %v", harness.ObjectKey(obj), err)
		}
	}
	assertRelease(t, helm, release, 1)
	// The default is mutual TLS with certificates the chart generates (issue 15).
	serverSecret, clientSecret := release+"-extender-tls", release+"-scheduler-client-tls"
	svcHost := release + "-extender." + helmNamespace + ".svc"
	installed := checkGeneratedSecrets(t, generatedSecrets(t, cp), serverSecret, clientSecret, svcHost)
	checksum := schedulerTLSChecksum(t, cp)
	if checksum == "" {
		t.Errorf("the scheduler Deployment has no checksum/tls annotation (it restarts kube-scheduler when the certificates change)")
	}

	// 4. upgrade: a changed value must reach the objects; the certificates stay (lookup).
	if _, err := helm.Run(ctx, 3*time.Minute, "upgrade", release, chart, "--namespace", helmNamespace,
		"--set", "extender.replicas=3", "--set", "kubeScheduler.weight=7", "--timeout", "2m"); err != nil {
		t.Fatalf("upgrade: %v", err)
	}
	assertRelease(t, helm, release, 2)
	upgraded := checkGeneratedSecrets(t, generatedSecrets(t, cp), serverSecret, clientSecret, svcHost)
	if d := sameSecretData(installed, upgraded); d != "" {
		t.Errorf("helm upgrade replaced the generated certificates (%s); it must reuse them until their renewal time", d)
	}
	if got := schedulerTLSChecksum(t, cp); got != checksum {
		t.Errorf("after upgrade: checksum/tls %q, was %q: the scheduler would restart for nothing", got, checksum)
	}
	deps, err := cp.Admin.AppsV1().Deployments(helmNamespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	foundExtender := false
	for _, d := range deps.Items {
		if d.Labels["app.kubernetes.io/component"] == "extender" {
			foundExtender = true
			if d.Spec.Replicas == nil || *d.Spec.Replicas != 3 {
				t.Errorf("after upgrade: Deployment %s replicas = %v, want 3", d.Name, d.Spec.Replicas)
			}
		}
	}
	if !foundExtender {
		t.Errorf("after upgrade: no Deployment labelled app.kubernetes.io/component=extender in %s", helmNamespace)
	}
	cms, err := cp.Admin.CoreV1().ConfigMaps(helmNamespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	foundWeight := false
	for _, cm := range cms.Items {
		if cfg, ok := cm.Data["scheduler-config.yaml"]; ok {
			foundWeight = strings.Contains(cfg, "weight: 7")
		}
	}
	if !foundWeight {
		t.Errorf("after upgrade: the scheduler ConfigMap does not carry weight: 7")
	}

	// 4b. renewal: once toposched.io/tls-renew-after has passed, the next upgrade makes a new CA
	// and certificates (never one certificate alone: the CA's key is not kept) and changes the
	// scheduler's checksum/tls. The annotation is moved into the past here; the test's field
	// manager then owns it, so helm must force the conflict (a renewal helm itself scheduled
	// needs no flag).
	past, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{
		"toposched.io/tls-renew-after": time.Now().Add(-time.Hour).UTC().Format(time.RFC3339)}}})
	if _, err := cp.Admin.CoreV1().Secrets(helmNamespace).Patch(ctx, serverSecret, types.MergePatchType, past,
		metav1.PatchOptions{FieldManager: "toposched-e2e"}); err != nil {
		t.Fatal(err)
	}
	if _, err := helm.Run(ctx, 3*time.Minute, "upgrade", release, chart, "--namespace", helmNamespace, "--reuse-values",
		"--force-conflicts", "--timeout", "2m"); err != nil {
		t.Fatalf("upgrade after the renewal time: %v", err)
	}
	assertRelease(t, helm, release, 3)
	renewed := checkGeneratedSecrets(t, generatedSecrets(t, cp), serverSecret, clientSecret, svcHost)
	for _, key := range []string{"ca.crt", "tls.crt", "tls.key"} {
		for _, name := range []string{serverSecret, clientSecret} {
			if string(renewed[name][key]) == string(upgraded[name][key]) {
				t.Errorf("after the renewal time, helm upgrade kept %s %s", name, key)
			}
		}
	}
	if got := schedulerTLSChecksum(t, cp); got == checksum || got == "" {
		t.Errorf("after renewal: checksum/tls %q, was %q: kube-scheduler (which reads caFile once) would keep the old CA", got, checksum)
	}

	// 5. uninstall: every object of the release is gone; the CRD (crds/) stays, as helm documents.
	if _, err := helm.Run(ctx, 3*time.Minute, "uninstall", release, "--namespace", helmNamespace, "--timeout", "2m"); err != nil {
		t.Fatalf("uninstall: %v", err)
	}
	for _, obj := range defaults {
		err := harness.Eventually(30*time.Second, 250*time.Millisecond, func() (bool, error) {
			_, err := dyn.Get(ctx, obj, helmNamespace)
			if apierrors.IsNotFound(err) {
				return true, nil
			}
			return false, err
		})
		if err != nil {
			t.Errorf("after uninstall: %s still exists (%v)", harness.ObjectKey(obj), err)
		}
	}
	if _, err := crdClient.Get(ctx, crds[0].GetName(), metav1.GetOptions{}); err != nil {
		t.Errorf("after uninstall: the CRD should stay (helm never deletes crds/): %v", err)
	}
	if o, err := helm.Run(ctx, time.Minute, "list", "--namespace", helmNamespace, "-o", "json"); err != nil {
		t.Error(err)
	} else if strings.TrimSpace(o) != "[]" {
		t.Errorf("after uninstall: helm list = %s", o)
	}
}

// generatedSecrets are the Secrets in the release namespace, by name.
func generatedSecrets(t *testing.T, cp *harness.ControlPlane) map[string]*corev1.Secret {
	t.Helper()
	list, err := cp.Admin.CoreV1().Secrets(helmNamespace).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*corev1.Secret{}
	for i := range list.Items {
		out[list.Items[i].Name] = &list.Items[i]
	}
	return out
}

// schedulerTLSChecksum is the scheduler Deployment's checksum/tls pod annotation ("" = none).
func schedulerTLSChecksum(t *testing.T, cp *harness.ControlPlane) string {
	t.Helper()
	deps, err := cp.Admin.AppsV1().Deployments(helmNamespace).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range deps.Items {
		if d.Labels["app.kubernetes.io/component"] == "scheduler" {
			return d.Spec.Template.Annotations["checksum/tls"]
		}
	}
	t.Error("no scheduler Deployment")
	return ""
}

// waitEstablished waits until the API server reports the CRD Established.
func waitEstablished(ctx context.Context, crdClient dynamic.ResourceInterface, name string) error {
	return harness.Eventually(30*time.Second, 250*time.Millisecond, func() (bool, error) {
		crd, err := crdClient.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		conds, _, _ := unstructured.NestedSlice(crd.Object, "status", "conditions")
		for _, c := range conds {
			m, _ := c.(map[string]any)
			if m["type"] == "Established" && m["status"] == "True" {
				return true, nil
			}
		}
		return false, nil
	})
}

// installMonitoringCRDs creates the Prometheus Operator's CRDs (ServiceMonitor, PrometheusRule,
// from the pinned module: e2e/build-peers.sh prometheus-operator) and waits until discovery
// serves their kinds, so that the chart's monitoring objects are judged by the real schemas.
func installMonitoringCRDs(t *testing.T, ctx context.Context, dyn *harness.Dynamic, crdClient dynamic.ResourceInterface, files []string) {
	t.Helper()
	for _, f := range files {
		text, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		objs, err := harness.ParseObjects(string(text))
		if err != nil || len(objs) != 1 || objs[0].GetKind() != "CustomResourceDefinition" {
			t.Fatalf("%s: want one CRD, got %d objects (%v)", f, len(objs), err)
		}
		crd := objs[0]
		if _, err := crdClient.Create(ctx, crd, metav1.CreateOptions{FieldManager: "toposched-e2e"}); err != nil {
			t.Fatalf("creating CRD %s from %s: %v", crd.GetName(), f, err)
		}
		if err := waitEstablished(ctx, crdClient, crd.GetName()); err != nil {
			t.Fatalf("CRD %s not Established: %v", crd.GetName(), err)
		}
		group, _, _ := unstructured.NestedString(crd.Object, "spec", "group")
		kind, _, _ := unstructured.NestedString(crd.Object, "spec", "names", "kind")
		err = harness.Eventually(30*time.Second, 250*time.Millisecond, func() (bool, error) {
			dyn.Mapper.Reset()
			_, err := dyn.Mapper.RESTMapping(schema.GroupKind{Group: group, Kind: kind})
			return err == nil, nil
		})
		if err != nil {
			t.Fatalf("%s.%s not served after its CRD was Established: %v", kind, group, err)
		}
		t.Logf("installed CRD %s from %s", crd.GetName(), f)
	}
}

func assertRelease(t *testing.T, helm *harness.Helm, release string, revision int) {
	t.Helper()
	o, err := helm.Run(context.Background(), time.Minute, "status", release, "--namespace", helmNamespace, "-o", "json")
	if err != nil {
		t.Errorf("status: %v", err)
		return
	}
	var st struct {
		Version int `json:"version"`
		Info    struct {
			Status string `json:"status"`
		} `json:"info"`
	}
	if err := json.Unmarshal([]byte(o), &st); err != nil {
		t.Errorf("status: %v\n%s", err, o)
		return
	}
	if st.Info.Status != "deployed" || st.Version != revision {
		t.Errorf("release %s: status %q revision %d, want deployed revision %d", release, st.Info.Status, st.Version, revision)
	}
}

func firstLines(s string, n int) string {
	lines := strings.SplitN(s, "\n", n+1)
	if len(lines) > n {
		lines = lines[:n]
	}
	return strings.Join(lines, "\n")
}
