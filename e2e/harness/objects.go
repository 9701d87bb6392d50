package harness

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/restmapper"
)

// ParseObjects splits a multi-document YAML stream (helm template output) into objects,
// skipping empty documents.
func ParseObjects(text string) ([]*unstructured.Unstructured, error) {
	dec := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(text), 4096)
	var out []*unstructured.Unstructured
	for {
		var m map[string]any
		if err := dec.Decode(&m); err != nil {
			if errors.Is(err, io.EOF) {
				return out, nil
			}
			return nil, err
		}
		if len(m) == 0 {
			continue
		}
		out = append(out, &unstructured.Unstructured{Object: m})
	}
}

// Dynamic is a dynamic client with a discovery-backed REST mapper.
type Dynamic struct {
	Client dynamic.Interface
	Mapper meta.ResettableRESTMapper
}

// NewDynamic builds a Dynamic for the control plane's admin.
func (cp *ControlPlane) NewDynamic() *Dynamic {
	dc := discovery.NewDiscoveryClientForConfigOrDie(cp.AdminConfig)
	return &Dynamic{
		Client: dynamic.NewForConfigOrDie(cp.AdminConfig),
		Mapper: restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc)),
	}
}

// Resource returns the client for obj's kind (namespaced in ns when the kind is namespaced and
// obj names no namespace).
func (d *Dynamic) Resource(obj *unstructured.Unstructured, ns string) (dynamic.ResourceInterface, error) {
	gvk := obj.GroupVersionKind()
	m, err := d.Mapper.RESTMapping(schema.GroupKind{Group: gvk.Group, Kind: gvk.Kind}, gvk.Version)
	if err != nil {
		d.Mapper.Reset()
		m, err = d.Mapper.RESTMapping(schema.GroupKind{Group: gvk.Group, Kind: gvk.Kind}, gvk.Version)
		if err != nil {
			return nil, err
		}
	}
	if m.Scope.Name() == meta.RESTScopeNameNamespace {
		if obj.GetNamespace() != "" {
			ns = obj.GetNamespace()
		}
		return d.Client.Resource(m.Resource).Namespace(ns), nil
	}
	return d.Client.Resource(m.Resource), nil
}

// ValidateServerSide sends obj to the API server as a server-side apply with dryRun=All and
// fieldValidation=Strict: the server decodes, defaults, validates (OpenAPI schema, CRD schema,
// admission) and reports unknown or duplicate fields, but stores nothing.
func (d *Dynamic) ValidateServerSide(ctx context.Context, obj *unstructured.Unstructured, ns string) error {
	ri, err := d.Resource(obj, ns)
	if err != nil {
		return err
	}
	body, err := obj.MarshalJSON()
	if err != nil {
		return err
	}
	force := true
	_, err = ri.Patch(ctx, obj.GetName(), types.ApplyPatchType, body, metav1.PatchOptions{
		DryRun: []string{metav1.DryRunAll}, FieldManager: "toposched-e2e", Force: &force, FieldValidation: "Strict",
	})
	return err
}

// Get reads obj's live counterpart.
func (d *Dynamic) Get(ctx context.Context, obj *unstructured.Unstructured, ns string) (*unstructured.Unstructured, error) {
	ri, err := d.Resource(obj, ns)
	if err != nil {
		return nil, err
	}
	return ri.Get(ctx, obj.GetName(), metav1.GetOptions{})
}

// ObjectKey names an object for messages: Kind/namespace/name.
func ObjectKey(obj *unstructured.Unstructured) string {
	if obj.GetNamespace() != "" {
		return fmt.Sprintf("%s/%s/%s", obj.GetKind(), obj.GetNamespace(), obj.GetName())
	}
	return fmt.Sprintf("%s/%s", obj.GetKind(), obj.GetName())
}

// Helm runs the pinned helm binary with its own config/cache/data homes (nothing of the
// user's helm setup is read or written) against the control plane.
type Helm struct {
	Bin, Kubeconfig, Home string
}

// NewHelm returns a Helm whose homes live in a temporary directory.
func NewHelm(t testing.TB, bin, kubeconfig string) *Helm {
	return &Helm{Bin: bin, Kubeconfig: kubeconfig, Home: t.TempDir()}
}

// Run runs helm with args (and --kubeconfig when set) within timeout.
func (h *Helm) Run(ctx context.Context, timeout time.Duration, args ...string) (string, error) {
	env := []string{
		"HELM_CONFIG_HOME=" + filepath.Join(h.Home, "config"),
		"HELM_CACHE_HOME=" + filepath.Join(h.Home, "cache"),
		"HELM_DATA_HOME=" + filepath.Join(h.Home, "data"),
		"KUBECONFIG=" + h.Kubeconfig,
	}
	out, err := Run(ctx, timeout, env, h.Bin, args...)
	if err != nil {
		var b bytes.Buffer
		fmt.Fprintf(&b, "helm %s: %v\n%s", strings.Join(args, " "), err, out)
		return out, errors.New(b.String())
	}
	return out, nil
}
