package harness

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// ControlPlane is a real etcd and kube-apiserver on 127.0.0.1, both serving TLS with
// certificates from a CA generated for this test, with service-account token signing and the
// Node,RBAC authorizer. No controller-manager runs: nothing creates ReplicaSets or Pods from
// Deployments, and no GC runs; tests create the objects a kubelet or controller would.
type ControlPlane struct {
	Dir, LogDir     string
	CA              *CA
	URL             string // https://127.0.0.1:PORT
	AdminKubeconfig string
	AdminConfig     *rest.Config
	Admin           *kubernetes.Clientset
	Etcd, APIServer *Proc
}

// StartControlPlane starts etcd and kube-apiserver and waits (bounded) for /readyz.
func StartControlPlane(t testing.TB, peers Peers, logDir string) *ControlPlane {
	t.Helper()
	dir := t.TempDir()
	pki := filepath.Join(dir, "pki")
	if err := os.MkdirAll(pki, 0o700); err != nil {
		t.Fatal(err)
	}
	cp := &ControlPlane{Dir: dir, LogDir: logDir}
	cp.CA = NewCA(t, pki, "e2e-ca")
	etcdCert, etcdKey := cp.CA.Issue(t, pki, "etcd-server", "etcd", nil, []string{"127.0.0.1"}, []string{"localhost"})
	etcdClientCert, etcdClientKey := cp.CA.Issue(t, pki, "apiserver-etcd-client", "kube-apiserver-etcd-client", nil, nil, nil)
	apiCert, apiKey := cp.CA.Issue(t, pki, "apiserver", "kube-apiserver", nil,
		[]string{"127.0.0.1", "10.0.0.1"},
		[]string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"})
	adminCert, adminKey := cp.CA.Issue(t, pki, "admin", "e2e-admin", []string{"system:masters"}, nil, nil)
	saKey, saPub := NewServiceAccountKey(t, pki)

	for attempt := 1; ; attempt++ {
		err := cp.start(t, peers, logDir, dir, etcdCert, etcdKey, etcdClientCert, etcdClientKey, apiCert, apiKey, adminCert, adminKey, saKey, saPub)
		if err == nil {
			return cp
		}
		// A port picked free can be taken by someone else before the server binds it.
		inUse := strings.Contains(cp.Etcd.Tail(20000)+cp.APIServer.Tail(20000), "address already in use")
		cp.APIServer.Stop(10 * time.Second)
		cp.Etcd.Stop(10 * time.Second)
		if !inUse || attempt == 3 {
			t.Fatalf("control plane not ready: %v\n--- kube-apiserver log tail:\n%s", err, cp.APIServer.Tail(4000))
		}
		t.Logf("control plane: a port was taken (attempt %d), retrying with new ports", attempt)
		_ = os.RemoveAll(filepath.Join(dir, "etcd"))
	}
}

func (cp *ControlPlane) start(t testing.TB, peers Peers, logDir, dir, etcdCert, etcdKey, etcdClientCert, etcdClientKey, apiCert, apiKey, adminCert, adminKey, saKey, saPub string) error {
	etcdPort, peerPort, apiPort := FreePort(t), FreePort(t), FreePort(t)
	etcdURL := fmt.Sprintf("https://127.0.0.1:%d", etcdPort)
	peerURL := fmt.Sprintf("http://127.0.0.1:%d", peerPort)
	cp.Etcd = Start(t, logDir, "etcd", nil, peers.Etcd,
		"--name", "e2e",
		"--data-dir", filepath.Join(dir, "etcd"),
		"--listen-client-urls", etcdURL, "--advertise-client-urls", etcdURL,
		"--listen-peer-urls", peerURL, "--initial-advertise-peer-urls", peerURL,
		"--initial-cluster", "e2e="+peerURL,
		"--cert-file", etcdCert, "--key-file", etcdKey,
		"--client-cert-auth", "--trusted-ca-file", cp.CA.Path,
		"--unsafe-no-fsync", "--log-level", "warn")

	cp.URL = fmt.Sprintf("https://127.0.0.1:%d", apiPort)
	cp.APIServer = Start(t, logDir, "kube-apiserver", nil, peers.APIServer,
		"--etcd-servers", etcdURL,
		"--etcd-cafile", cp.CA.Path, "--etcd-certfile", etcdClientCert, "--etcd-keyfile", etcdClientKey,
		"--bind-address", "127.0.0.1", "--advertise-address", "127.0.0.1",
		"--secure-port", strconv.Itoa(apiPort),
		"--cert-dir", filepath.Join(dir, "apiserver-certs"),
		"--tls-cert-file", apiCert, "--tls-private-key-file", apiKey,
		"--client-ca-file", cp.CA.Path,
		"--service-account-issuer", "https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file", saPub,
		"--service-account-signing-key-file", saKey,
		"--authorization-mode", "Node,RBAC",
		"--service-cluster-ip-range", "10.0.0.0/24",
		"--allow-privileged=true",
		// The kubernetes Service's endpoints would be this loopback address, which the
		// reconciler refuses; nothing here needs them.
		"--endpoint-reconciler-type", "none",
		"--profiling=false",
		"--v", "1")

	cp.AdminKubeconfig = filepath.Join(dir, "admin.kubeconfig")
	WriteKubeconfig(t, cp.AdminKubeconfig, cp.URL, cp.CA.Path, "e2e-admin", &clientcmdapi.AuthInfo{
		ClientCertificate: adminCert, ClientKey: adminKey,
	})
	cfg, err := clientcmd.BuildConfigFromFlags("", cp.AdminKubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cfg.QPS, cfg.Burst = 200, 400
	cp.AdminConfig = cfg
	cp.Admin = kubernetes.NewForConfigOrDie(cfg)

	start := time.Now()
	err = Eventually(120*time.Second, 500*time.Millisecond, func() (bool, error) {
		for _, p := range []*Proc{cp.Etcd, cp.APIServer} {
			if ok, err := p.Exited(); ok {
				return false, Permanent(fmt.Errorf("%s exited: %v", p.Name, err))
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		body, err := cp.Admin.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		if err != nil {
			return false, fmt.Errorf("/readyz: %v %s", err, body)
		}
		return string(body) == "ok", nil
	})
	if err != nil {
		return err
	}
	t.Logf("control plane ready at %s in %s", cp.URL, time.Since(start).Round(time.Millisecond))
	return nil
}

// WriteKubeconfig writes a kubeconfig with one cluster, user and context.
func WriteKubeconfig(t testing.TB, path, server, caPath, user string, auth *clientcmdapi.AuthInfo) {
	t.Helper()
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["e2e"] = &clientcmdapi.Cluster{Server: server, CertificateAuthority: caPath}
	cfg.AuthInfos[user] = auth
	cfg.Contexts["e2e"] = &clientcmdapi.Context{Cluster: "e2e", AuthInfo: user}
	cfg.CurrentContext = "e2e"
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
}

// EnsureNamespace creates ns and its "default" ServiceAccount (the controller-manager, absent
// here, would create the latter; the ServiceAccount admission plugin needs it for pods).
func (cp *ControlPlane) EnsureNamespace(t testing.TB, ns string) {
	t.Helper()
	ctx := context.Background()
	_, err := cp.Admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	cp.EnsureDefaultServiceAccount(t, ns)
}

// EnsureDefaultServiceAccount creates ns/default if missing.
func (cp *ControlPlane) EnsureDefaultServiceAccount(t testing.TB, ns string) {
	t.Helper()
	_, err := cp.Admin.CoreV1().ServiceAccounts(ns).Create(context.Background(),
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}

// ServiceAccountKubeconfig asks the TokenRequest API for a token of ns/name (one hour) and
// writes a kubeconfig that uses it to dir/<name>.kubeconfig. The ServiceAccount must exist (the
// chart creates it): whatever it may do is exactly what its RBAC grants.
func (cp *ControlPlane) ServiceAccountKubeconfig(t testing.TB, dir, ns, name string) string {
	t.Helper()
	exp := int64(3600)
	tr, err := cp.Admin.CoreV1().ServiceAccounts(ns).CreateToken(context.Background(), name,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &exp}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("TokenRequest for %s/%s: %v", ns, name, err)
	}
	path := filepath.Join(dir, name+".kubeconfig")
	WriteKubeconfig(t, path, cp.URL, cp.CA.Path, "system:serviceaccount:"+ns+":"+name, &clientcmdapi.AuthInfo{Token: tr.Status.Token})
	return path
}

// ClientFor builds a clientset from a kubeconfig file.
func ClientFor(t testing.TB, kubeconfig string) *kubernetes.Clientset {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	return kubernetes.NewForConfigOrDie(cfg)
}
