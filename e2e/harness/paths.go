package harness

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// E2EDir is the e2e/ directory of the repository (found from this source file).
func E2EDir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Dir(filepath.Dir(file))
}

// RepoRoot is the repository root (the parent of e2e/).
func RepoRoot() string { return filepath.Dir(E2EDir()) }

// ChartDir is charts/toposched ($TOPOSCHED_E2E_CHART overrides it: a modified copy, e.g. to
// see the suite fail when an RBAC rule is removed).
func ChartDir() string {
	if d := os.Getenv("TOPOSCHED_E2E_CHART"); d != "" {
		return d
	}
	return filepath.Join(RepoRoot(), "charts", "toposched")
}

// OutputDir is e2e/_output/<name>/ (logs, rendered files), emptied first; kept after the run
// for inspection (gitignored).
func OutputDir(t testing.TB, name string) string {
	t.Helper()
	d := filepath.Join(E2EDir(), "_output", name)
	if err := os.RemoveAll(d); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(d, 0o755); err != nil {
		t.Fatal(err)
	}
	return d
}

// CacheDir is where e2e/build-peers.sh puts the peers.
func CacheDir() string {
	if d := os.Getenv("TOPOSCHED_E2E_CACHE"); d != "" {
		return d
	}
	base := os.Getenv("XDG_CACHE_HOME")
	if base == "" {
		home, _ := os.UserHomeDir()
		base = filepath.Join(home, ".cache")
	}
	return filepath.Join(base, "toposched-e2e")
}

// PinnedVersion reads the version e2e/tools/<peer>/go.mod requires of module.
func PinnedVersion(peer, module string) (string, error) {
	path := filepath.Join(E2EDir(), "tools", peer, "go.mod")
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) >= 3 && fields[0] == "require" && fields[1] == module {
			return fields[2], nil
		}
		if len(fields) >= 2 && fields[0] == module {
			return fields[1], nil
		}
	}
	return "", fmt.Errorf("%s does not require %s", path, module)
}

// Peers are the paths of the built peer binaries.
type Peers struct {
	Etcd, APIServer, Scheduler, Helm, Kwok string
	// Kubectl is built with the kube peer (cmd/kubectl); "" where a cache from before it was
	// added lacks it (e2e/build-peers.sh kube adds it).
	Kubectl    string
	KwokStages []string // kwok's stage YAML files (its --config)
	// MonitoringCRDs are the Prometheus Operator's ServiceMonitor and PrometheusRule CRD files
	// (the chart's monitoring objects are validated against them).
	MonitoringCRDs []string
	Toposched      string
	Versions       map[string]string // peer -> version
}

var peerModules = map[string]string{
	"kube": "k8s.io/kubernetes",
	"etcd": "go.etcd.io/etcd/server/v3",
	"helm": "helm.sh/helm/v4",
	"kwok": "sigs.k8s.io/kwok",
	// Not a binary: the pinned module's CRDs (e2e/build-peers.sh prometheus-operator).
	"prometheus-operator": "github.com/prometheus-operator/prometheus-operator",
}

// FindPeers locates every peer binary built by e2e/build-peers.sh and the toposched binary
// ($TOPOSCHED_BIN, else build/src/cmd/toposched); a missing one fails the test with the command
// that builds it.
func FindPeers(t testing.TB) Peers {
	t.Helper()
	p := Peers{Versions: map[string]string{}}
	dirs := map[string]string{}
	for peer, mod := range peerModules {
		v, err := PinnedVersion(peer, mod)
		if err != nil {
			t.Fatal(err)
		}
		p.Versions[peer] = v
		d := filepath.Join(CacheDir(), peer+"-"+v)
		if _, err := os.Stat(filepath.Join(d, ".complete")); err != nil {
			t.Fatalf("peer %s %s is not built in %s: run e2e/build-peers.sh (or e2e/run.sh)", peer, v, d)
		}
		dirs[peer] = d
	}
	p.Etcd = filepath.Join(dirs["etcd"], "etcd")
	p.APIServer = filepath.Join(dirs["kube"], "kube-apiserver")
	p.Scheduler = filepath.Join(dirs["kube"], "kube-scheduler")
	if k := filepath.Join(dirs["kube"], "kubectl"); fileExists(k) {
		p.Kubectl = k
	}
	p.Helm = filepath.Join(dirs["helm"], "helm")
	p.Kwok = filepath.Join(dirs["kwok"], "kwok")
	stages, _ := filepath.Glob(filepath.Join(dirs["kwok"], "stages", "*.yaml"))
	p.KwokStages = stages
	crds, _ := filepath.Glob(filepath.Join(dirs["prometheus-operator"], "crds", "*.yaml"))
	if len(crds) == 0 {
		t.Fatalf("no CRDs in %s: run e2e/build-peers.sh prometheus-operator", filepath.Join(dirs["prometheus-operator"], "crds"))
	}
	p.MonitoringCRDs = crds
	p.Toposched = os.Getenv("TOPOSCHED_BIN")
	if p.Toposched == "" {
		p.Toposched = filepath.Join(RepoRoot(), "build", "src", "cmd", "toposched")
	}
	if st, err := os.Stat(p.Toposched); err != nil || st.IsDir() {
		t.Fatalf("toposched binary not found at %s: build the project (scripts/test.sh or cmake --build build) or set TOPOSCHED_BIN", p.Toposched)
	}
	return p
}

// TopologiesDir is the shared real topology exports: $TOPOSCHED_SHARED_TOPOLOGIES, else
// ../shared/topologies next to the repository. The test is skipped, saying so, when absent.
func TopologiesDir(t testing.TB) string {
	t.Helper()
	d := os.Getenv("TOPOSCHED_SHARED_TOPOLOGIES")
	if d == "" {
		d = filepath.Join(filepath.Dir(RepoRoot()), "shared", "topologies")
	}
	if st, err := os.Stat(d); err != nil || !st.IsDir() {
		t.Skipf("real topology exports not found at %s (set TOPOSCHED_SHARED_TOPOLOGIES): skipping", d)
	}
	return d
}

func fileExists(path string) bool {
	st, err := os.Stat(path)
	return err == nil && !st.IsDir()
}
