package harness

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"
)

// ServiceProxy stands in for a ClusterIP Service and kube-proxy: each request goes to the
// endpoint pod the Service's selector matches now (read from the API server per request),
// whose container port is a local toposched process. With the chart's Service, whose selector
// includes toposched.io/leader="true", that is the leader. It also records what the scheduler
// and the extender said to each other: the nodes each filter call passed per pod, and every
// bind and its answer.
//
// With TLS (the chart's default) it has to read the calls to record them, so it ends the
// caller's TLS and opens its own to the replica, and stays faithful to the chart's TLS on both
// legs: it serves the extender's own certificate (the caller verifies it for the Service's name,
// as kube-scheduler's tlsConfig.serverName asks), asks for a client certificate and verifies one
// that comes against the extender's CA (as the extender does: a certificate that does not verify
// ends the handshake, none at all is let through), and presents the chart's client certificate to
// the replica only for a caller that presented a verified one. A caller without a certificate
// reaches the replica without one, so the replica's own check (403 for a verb) is what answers it.
type ServiceProxy struct {
	Client    kubernetes.Interface
	Namespace string
	Selector  labels.Selector

	mu         sync.Mutex
	ports      map[string]int // pod name -> local port
	passed     map[string]map[string]bool
	binds      []BindRecord
	preempts   []PreemptRecord
	events     []VolcanoEvent
	answered   map[string]map[int]int // URL path -> HTTP status -> calls
	withCert   map[string]int         // URL path -> calls whose caller presented a verified client certificate
	multi      []string               // times the selector matched more than one running endpoint
	noTarget   int
	server     *http.Server
	tls        *ProxyTLS
	serverTLS  *tls.Config
	transport  *http.Transport // to the replicas; with TLS, presents no client certificate
	clientAuth *http.Transport // with TLS: presents ProxyTLS.Client (nil without one)
	scheme     string
	URL        string
}

// ProxyTLS is the chart's TLS material as the extender's Secrets hold it (PEM).
type ProxyTLS struct {
	ServerCert, ServerKey []byte // the extender's serving pair (--tls-cert, --tls-key)
	CA                    []byte // ca.crt: verifies the replicas, and callers that present a certificate
	ServerName            string // the name the replicas' certificate is verified for
	ClientCert, ClientKey []byte // the scheduler's client pair (mutual TLS); empty without
}

// BindRecord is one bind call through the proxy.
type BindRecord struct {
	Pod, Node, Error, Replica string
	OK                        bool
	Lost                      bool // sent, but the replica never answered

}

// PreemptRecord is one answered preempt call: the candidate nodes kube-scheduler offered and
// the nodes (with their victims) the extender kept.
type PreemptRecord struct {
	Pod     string
	Offered []string
	Kept    map[string][]string // node -> victim pod UIDs
}

// NewServiceProxy listens on 127.0.0.1 (a free port) and serves until Close; plain HTTP when
// t is nil, else HTTPS as the type's comment says.
func NewServiceProxy(client kubernetes.Interface, ns string, selector map[string]string, t *ProxyTLS) (*ServiceProxy, error) {
	p := &ServiceProxy{
		Client: client, Namespace: ns, Selector: labels.SelectorFromSet(selector),
		ports: map[string]int{}, passed: map[string]map[string]bool{}, answered: map[string]map[int]int{},
		withCert:  map[string]int{},
		transport: &http.Transport{MaxIdleConnsPerHost: 16, IdleConnTimeout: 30 * time.Second},
		scheme:    "http", tls: t,
	}
	if t != nil {
		serving, err := tls.X509KeyPair(t.ServerCert, t.ServerKey)
		if err != nil {
			return nil, fmt.Errorf("the extender's serving pair: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(t.CA) {
			return nil, errors.New("ca.crt holds no certificate")
		}
		p.serverTLS = &tls.Config{Certificates: []tls.Certificate{serving}, ClientCAs: pool,
			ClientAuth: tls.VerifyClientCertIfGiven, MinVersion: tls.VersionTLS12}
		upstream := &tls.Config{RootCAs: pool, ServerName: t.ServerName, MinVersion: tls.VersionTLS12}
		p.transport.TLSClientConfig = upstream
		if len(t.ClientCert) > 0 {
			pair, err := tls.X509KeyPair(t.ClientCert, t.ClientKey)
			if err != nil {
				return nil, fmt.Errorf("the scheduler's client pair: %w", err)
			}
			withCert := upstream.Clone()
			withCert.Certificates = []tls.Certificate{pair}
			p.clientAuth = &http.Transport{MaxIdleConnsPerHost: 16, IdleConnTimeout: 30 * time.Second, TLSClientConfig: withCert}
		}
		p.scheme = "https"
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p.URL = p.scheme + "://" + l.Addr().String()
	p.server = &http.Server{Handler: p, ReadHeaderTimeout: 10 * time.Second}
	go p.server.Serve(p.Listener(l))
	return p, nil
}

// Listener wraps l as the proxy's own port is wrapped (TLS, when the proxy has it), for a second
// address that serves the same Handler.
func (p *ServiceProxy) Listener(l net.Listener) net.Listener {
	if p.serverTLS == nil {
		return l
	}
	return tls.NewListener(l, p.serverTLS)
}

// SetEndpoint maps a pod name to the local port of the process that stands for it (0 = none).
func (p *ServiceProxy) SetEndpoint(pod string, port int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if port == 0 {
		delete(p.ports, pod)
	} else {
		p.ports[pod] = port
	}
	p.transport.CloseIdleConnections()
	if p.clientAuth != nil {
		p.clientAuth.CloseIdleConnections()
	}
}

// Close stops the proxy.
func (p *ServiceProxy) Close() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = p.server.Shutdown(ctx)
}

// Endpoints are the names of the pods the selector matches now (running, not deleted), sorted.
func (p *ServiceProxy) Endpoints(ctx context.Context) ([]string, error) {
	pods, err := p.Client.CoreV1().Pods(p.Namespace).List(ctx, metav1.ListOptions{LabelSelector: p.Selector.String()})
	if err != nil {
		return nil, err
	}
	var names []string
	for _, pod := range pods.Items {
		if pod.DeletionTimestamp == nil && pod.Status.Phase == corev1.PodRunning {
			names = append(names, pod.Name)
		}
	}
	sort.Strings(names)
	return names, nil
}

func (p *ServiceProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 3*time.Second)
	defer cancel()
	eps, err := p.Endpoints(ctx)
	if err != nil {
		http.Error(w, "endpoints: "+err.Error(), http.StatusServiceUnavailable)
		return
	}
	p.mu.Lock()
	if len(eps) > 1 {
		p.multi = append(p.multi, fmt.Sprintf("%s: %s", time.Now().Format(time.RFC3339Nano), strings.Join(eps, ",")))
	}
	port, target := 0, ""
	for _, e := range eps {
		if pt, ok := p.ports[e]; ok {
			port, target = pt, e
			break
		}
	}
	if port == 0 {
		p.noTarget++
	}
	p.mu.Unlock()
	if port == 0 {
		// What a Service without ready endpoints does: the connection is refused.
		http.Error(w, "no endpoints", http.StatusServiceUnavailable)
		return
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	req, err := http.NewRequestWithContext(r.Context(), r.Method, fmt.Sprintf("%s://127.0.0.1:%d%s", p.scheme, port, r.URL.RequestURI()), bytes.NewReader(body))
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	req.Header = r.Header.Clone()
	transport, verified := p.transport, r.TLS != nil && len(r.TLS.VerifiedChains) > 0
	if verified && p.clientAuth != nil {
		transport = p.clientAuth
	}
	if verified {
		p.mu.Lock()
		p.withCert[r.URL.Path]++
		p.mu.Unlock()
	}
	resp, err := transport.RoundTrip(req)
	if err != nil {
		p.recordLost(r.URL.Path, body, target, err)
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	rbody, err := io.ReadAll(resp.Body)
	if err != nil {
		p.recordLost(r.URL.Path, body, target, err)
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	p.mu.Lock()
	if p.answered[r.URL.Path] == nil {
		p.answered[r.URL.Path] = map[int]int{}
	}
	p.answered[r.URL.Path][resp.StatusCode]++
	p.mu.Unlock()
	if resp.StatusCode == http.StatusOK {
		p.record(r.URL.Path, body, rbody, target)
	}
	for k, v := range resp.Header {
		w.Header()[k] = v
	}
	w.WriteHeader(resp.StatusCode)
	_, _ = w.Write(rbody)
}

func (p *ServiceProxy) record(path string, req, resp []byte, target string) {
	switch {
	case strings.HasSuffix(path, "/filter"):
		var args extenderv1.ExtenderArgs
		var res extenderv1.ExtenderFilterResult
		if json.Unmarshal(req, &args) != nil || json.Unmarshal(resp, &res) != nil || args.Pod == nil {
			return
		}
		key := args.Pod.Namespace + "/" + args.Pod.Name
		p.mu.Lock()
		defer p.mu.Unlock()
		if p.passed[key] == nil {
			p.passed[key] = map[string]bool{}
		}
		if res.NodeNames != nil {
			for _, n := range *res.NodeNames {
				p.passed[key][n] = true
			}
		}
		if res.Nodes != nil {
			for _, n := range res.Nodes.Items {
				p.passed[key][n.Name] = true
			}
		}
	case strings.HasSuffix(path, "/preempt"):
		var args extenderv1.ExtenderPreemptionArgs
		var res extenderv1.ExtenderPreemptionResult
		if json.Unmarshal(req, &args) != nil || json.Unmarshal(resp, &res) != nil || args.Pod == nil {
			return
		}
		rec := PreemptRecord{Pod: args.Pod.Namespace + "/" + args.Pod.Name, Kept: map[string][]string{}}
		for n := range args.NodeNameToMetaVictims {
			rec.Offered = append(rec.Offered, n)
		}
		for n := range args.NodeNameToVictims {
			rec.Offered = append(rec.Offered, n)
		}
		sort.Strings(rec.Offered)
		for n, v := range res.NodeNameToMetaVictims {
			var uids []string
			if v != nil {
				for _, mp := range v.Pods {
					uids = append(uids, mp.UID)
				}
			}
			rec.Kept[n] = uids
		}
		p.mu.Lock()
		defer p.mu.Unlock()
		p.preempts = append(p.preempts, rec)
	case strings.HasSuffix(path, "/predicate"):
		// Volcano's extender plugin: {"task","node"} -> {"status","code"}; a pass is code 0
		// with no message (volcano-sh/volcano pkg/scheduler/plugins/extender/extender.go).
		var args volcanoPredicateArgs
		var res struct {
			Status string `json:"status"`
			Code   int    `json:"code"`
		}
		if json.Unmarshal(req, &args) != nil || json.Unmarshal(resp, &res) != nil || args.Task == nil || args.Node == nil {
			return
		}
		if res.Code != 0 || res.Status != "" {
			return
		}
		key := args.Task.Namespace + "/" + args.Task.Name
		p.mu.Lock()
		defer p.mu.Unlock()
		if p.passed[key] == nil {
			p.passed[key] = map[string]bool{}
		}
		p.passed[key][args.Node.Name] = true
	case strings.HasSuffix(path, "/allocate"), strings.HasSuffix(path, "/deallocate"):
		var args volcanoEventArgs
		var res struct {
			ErrorMessage string `json:"errorMessage"`
		}
		if json.Unmarshal(req, &args) != nil || json.Unmarshal(resp, &res) != nil || args.Task == nil {
			return
		}
		p.mu.Lock()
		defer p.mu.Unlock()
		allocate := strings.HasSuffix(path, "/allocate")
		p.events = append(p.events, VolcanoEvent{Allocate: allocate, Pipelined: allocate && args.Task.Status == volcanoPipelined,
			Pod: args.Task.Namespace + "/" + args.Task.Name, Node: args.Task.NodeName, Error: res.ErrorMessage, Replica: target,
			At: time.Now()})
	case strings.HasSuffix(path, "/bind"):
		var args extenderv1.ExtenderBindingArgs
		var res extenderv1.ExtenderBindingResult
		if json.Unmarshal(req, &args) != nil || json.Unmarshal(resp, &res) != nil {
			return
		}
		p.mu.Lock()
		defer p.mu.Unlock()
		p.binds = append(p.binds, BindRecord{Pod: args.PodNamespace + "/" + args.PodName, Node: args.Node,
			Error: res.Error, OK: res.Error == "", Replica: target})
	}
}

// recordLost records a bind whose answer never came. If the request may have reached the
// replica (it died while serving it), the bind may or may not have happened (Lost).
func (p *ServiceProxy) recordLost(path string, req []byte, target string, cause error) {
	if !strings.HasSuffix(path, "/bind") {
		return
	}
	var args extenderv1.ExtenderBindingArgs
	if json.Unmarshal(req, &args) != nil {
		return
	}
	// A refused connection never delivered the request: that bind certainly did not happen.
	var op *net.OpError
	delivered := !(errors.As(cause, &op) && op.Op == "dial")
	p.mu.Lock()
	defer p.mu.Unlock()
	p.binds = append(p.binds, BindRecord{Pod: args.PodNamespace + "/" + args.PodName, Node: args.Node,
		Error: "no answer: " + cause.Error(), Lost: delivered, Replica: target})
}

// volcanoTask is the part of Volcano's api.TaskInfo read here (its JSON has Go's field names;
// NodeName comes from the embedded TransactionContext).
type volcanoTask struct {
	Namespace, Name, NodeName string
	Status                    int // api.TaskStatus, a bit each (pkg/scheduler/api/types.go)
}

// volcanoPipelined is api.Pipelined (1 << 2 in volcano-sh/volcano pkg/scheduler/api/types.go).
const volcanoPipelined = 1 << 2

type volcanoPredicateArgs struct {
	Task *volcanoTask           `json:"task"`
	Node *struct{ Name string } `json:"node"`
}

type volcanoEventArgs struct {
	Task *volcanoTask `json:"task"`
}

// VolcanoEvent is one answered allocate or deallocate call of Volcano's extender plugin.
type VolcanoEvent struct {
	Allocate bool // else deallocate
	// An allocate of a task Volcano pipelined (its preempt action): the extender gives it no
	// devices until a later session allocates it, and Volcano may commit the statement with no
	// deallocate to follow.
	Pipelined        bool
	Pod, Node, Error string
	Replica          string
	At               time.Time // when the answer came back
}

// VolcanoEvents are the answered allocate and deallocate calls, in the order they were answered.
func (p *ServiceProxy) VolcanoEvents() []VolcanoEvent {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]VolcanoEvent(nil), p.events...)
}

// FilterPassed is the set of nodes any filter call (kube-scheduler) or predicate call (Volcano)
// passed for the pod ns/name.
func (p *ServiceProxy) FilterPassed(key string) map[string]bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := map[string]bool{}
	for n := range p.passed[key] {
		out[n] = true
	}
	return out
}

// Binds returns every bind call recorded.
func (p *ServiceProxy) Binds() []BindRecord {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]BindRecord(nil), p.binds...)
}

// Answered returns, per URL path, how many calls a replica answered with each HTTP status.
func (p *ServiceProxy) Answered() map[string]map[int]int {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := map[string]map[int]int{}
	for path, m := range p.answered {
		out[path] = map[int]int{}
		for code, n := range m {
			out[path][code] = n
		}
	}
	return out
}

// WithClientCertificate returns, per URL path, how many calls came from a caller that presented
// a client certificate the extender's CA verifies.
func (p *ServiceProxy) WithClientCertificate() map[string]int {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := map[string]int{}
	for path, n := range p.withCert {
		out[path] = n
	}
	return out
}

// Preempts returns every answered preempt call.
func (p *ServiceProxy) Preempts() []PreemptRecord {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]PreemptRecord(nil), p.preempts...)
}

// MultipleEndpoints returns the moments the Service selected more than one pod.
func (p *ServiceProxy) MultipleEndpoints() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.multi...)
}
