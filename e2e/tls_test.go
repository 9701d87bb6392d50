package e2e

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"toposched.io/e2e/harness"
)

// Issue 15: the chart's default between its kube-scheduler and the extender is mutual TLS with
// certificates the chart generates. TestKubeScheduler runs the real kube-scheduler with them (its
// binds reach the extender only with its client certificate); checkMutualTLS shows what happens
// to a caller without one; checkGeneratedSecrets (TestHelm) reads the certificates themselves.

// checkMutualTLS: on the leader, every verb the chart's KubeSchedulerConfiguration names answers
// 403 to a caller that presents no client certificate, directly and through the Service
// stand-in; a certificate of another CA does not get through the handshake; the chart's client
// certificate does; /healthz, /readyz and /metrics stay open to probes and scrapers.
func (c *cluster) checkMutualTLS(t *testing.T, leader string) {
	if c.tls == nil || len(c.tls.ClientCert) == 0 {
		t.Fatalf("the chart's default must be mutual TLS between its scheduler and the extender; "+
			"the extender serves TLS: %v, the scheduler presents a client certificate: %v", c.tls != nil, c.tls != nil && len(c.tls.ClientCert) > 0)
	}
	r := c.replicas[leader]
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(c.tls.CA)
	chartClient, err := tls.X509KeyPair(c.tls.ClientCert, c.tls.ClientKey)
	if err != nil {
		t.Fatal(err)
	}
	foreignCA := harness.NewCA(t, c.out, "foreign-ca")
	foreignCrt, foreignKey := foreignCA.Issue(t, c.out, "foreign-client", "toposched-scheduler", nil, nil, nil)
	foreign, err := tls.LoadX509KeyPair(foreignCrt, foreignKey)
	if err != nil {
		t.Fatal(err)
	}
	client := func(certs ...tls.Certificate) *http.Client {
		return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
			TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: c.tls.ServerName, Certificates: certs}}}
	}
	post := func(cl *http.Client, url string) (int, string, error) {
		resp, err := cl.Post(url, "application/json", strings.NewReader("{}"))
		if err != nil {
			return 0, "", err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return resp.StatusCode, string(b), nil
	}
	verbs := []string{"filter", "prioritize", "preempt", "bind"}
	cases := []struct {
		name   string
		client *http.Client
		base   string
		verbs  []string
		want   string // "403", "refused" (no answer: the handshake fails) or "not 403"
	}{
		{"no client certificate, at the replica", client(), c.replicaURL(r.port, ""), verbs, "403"},
		// The stand-in forwards a caller without a certificate without one: the replica answers.
		{"no client certificate, through the Service", client(), c.proxy.URL, verbs, "403"},
		{"a certificate of another CA, at the replica", client(foreign), c.replicaURL(r.port, ""), verbs, "refused"},
		// An empty filter body: refused for what it is (no pod), never for the caller; one verb
		// only, so that nothing else reaches the state the scheduler will use.
		{"the chart's client certificate, at the replica", client(chartClient), c.replicaURL(r.port, ""), []string{"filter"}, "not 403"},
	}
	for _, tc := range cases {
		for _, verb := range tc.verbs {
			code, body, err := post(tc.client, tc.base+"/scheduler/"+verb)
			switch {
			case tc.want == "403" && (err != nil || code != 403 || !strings.Contains(body, "client certificate")):
				t.Errorf("%s: POST /scheduler/%s: %d %v %q, want 403 naming the client certificate", tc.name, verb, code, err, body)
			case tc.want == "refused" && err == nil:
				t.Errorf("%s: POST /scheduler/%s answered %d %q, want the TLS handshake refused", tc.name, verb, code, body)
			case tc.want == "not 403" && (err != nil || code == 403):
				t.Errorf("%s: POST /scheduler/%s: %d %v %q, want it past the client-certificate check", tc.name, verb, code, err, body)
			}
			if verb == tc.verbs[len(tc.verbs)-1] {
				t.Logf("%s: POST /scheduler/%s: %d %v %.80q", tc.name, verb, code, err, body)
			}
		}
	}
	for _, path := range []string{"/healthz", "/readyz", "/metrics"} {
		if code, body, err := c.replicaGet(r.port, path); err != nil || code != 200 {
			t.Errorf("GET %s without a client certificate: %d %v %.200q, want 200 (probes and scrapers have none)", path, code, err, body)
		}
	}
}

// checkGeneratedSecrets reads the two Secrets the chart generates in its default install: the
// server certificate chains to ca.crt for the extender Service's names with server auth, the
// client certificate for client auth (both from Sprig's genSignedCert), each matches its key,
// both hold one CA. Returns the Secrets' data, to compare across upgrades.
func checkGeneratedSecrets(t *testing.T, secrets map[string]*corev1.Secret, server, client, svcHost string) map[string]map[string][]byte {
	t.Helper()
	out := map[string]map[string][]byte{}
	for name, usage := range map[string]x509.ExtKeyUsage{server: x509.ExtKeyUsageServerAuth, client: x509.ExtKeyUsageClientAuth} {
		s, ok := secrets[name]
		if !ok {
			t.Errorf("the default install has no Secret %s", name)
			continue
		}
		if s.Type != corev1.SecretTypeTLS {
			t.Errorf("Secret %s: type %s, want %s", name, s.Type, corev1.SecretTypeTLS)
		}
		out[name] = s.Data
		if _, err := tls.X509KeyPair(s.Data["tls.crt"], s.Data["tls.key"]); err != nil {
			t.Errorf("Secret %s: tls.crt and tls.key: %v", name, err)
		}
		block, _ := pem.Decode(s.Data["tls.crt"])
		if block == nil {
			t.Errorf("Secret %s: tls.crt is not PEM", name)
			continue
		}
		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			t.Errorf("Secret %s: tls.crt: %v", name, err)
			continue
		}
		roots := x509.NewCertPool()
		if !roots.AppendCertsFromPEM(s.Data["ca.crt"]) {
			t.Errorf("Secret %s: ca.crt holds no certificate", name)
			continue
		}
		opts := x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{usage}}
		if name == server {
			opts.DNSName = svcHost
		}
		if _, err := cert.Verify(opts); err != nil {
			t.Errorf("Secret %s: tls.crt does not verify against its ca.crt for %v (name %q): %v", name, usage, opts.DNSName, err)
		}
		t.Logf("Secret %s: %s, issued by %s, valid %s..%s, names %v", name, cert.Subject, cert.Issuer,
			cert.NotBefore.Format(time.RFC3339), cert.NotAfter.Format(time.RFC3339), cert.DNSNames)
	}
	if a, b := out[server]["ca.crt"], out[client]["ca.crt"]; len(a) > 0 && !bytes.Equal(a, b) {
		t.Errorf("Secrets %s and %s hold different CAs", server, client)
	}
	return out
}

// sameSecretData reports how two snapshots of the generated Secrets differ ("" = identical).
func sameSecretData(before, after map[string]map[string][]byte) string {
	var diffs []string
	for name, data := range before {
		for k, v := range data {
			if !bytes.Equal(v, after[name][k]) {
				diffs = append(diffs, fmt.Sprintf("%s %s", name, k))
			}
		}
	}
	return strings.Join(diffs, ", ")
}
