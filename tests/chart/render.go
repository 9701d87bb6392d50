// render: the subset of `helm template` that charts/toposched uses, without helm or a cluster.
//
// It loads Chart.yaml and values.yaml, merges each -f values file over them (maps deep-merged,
// everything else replaced, as helm does), and executes every template under templates/ with
// Go's text/template, sprig's TxtFuncMap and helm's own functions (include, tpl, required,
// toYaml, fromYaml, toJson, fail, lookup -> empty). Values are decoded the way helm decodes them
// (YAML -> JSON), so numbers are float64 and a template printing a large number raw shows the
// same 1e+07 helm would. Output: one "---" document per non-empty template, headed by
// "# Source: <chart>/templates/<file>", templates in file-name order; NOTES.txt to -notes.
//
// Build and run without network (Debian's packaged sources):
//   GO111MODULE=off GOPATH=/usr/share/gocode go run tests/chart/render.go -chart charts/toposched [-f v.yaml]...
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"text/template"

	"github.com/Masterminds/sprig"
	yamlv2 "gopkg.in/yaml.v2"
	yamlv3 "gopkg.in/yaml.v3"
)

type fileList []string

func (f *fileList) String() string     { return strings.Join(*f, ",") }
func (f *fileList) Set(v string) error { *f = append(*f, v); return nil }

// helmJSON turns a YAML-decoded value into what helm's values look like (sigs.k8s.io/yaml:
// YAML -> JSON -> interface{}): maps with string keys, numbers as float64.
func helmJSON(v interface{}) (interface{}, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	var out interface{}
	if err := json.Unmarshal(b, &out); err != nil {
		return nil, err
	}
	return out, nil
}

func readYAMLMap(path string) (map[string]interface{}, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var raw interface{}
	dec := yamlv3.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&raw); err != nil && err.Error() != "EOF" {
		return nil, fmt.Errorf("%s: %v", path, err)
	}
	if raw == nil {
		return map[string]interface{}{}, nil
	}
	v, err := helmJSON(raw)
	if err != nil {
		return nil, fmt.Errorf("%s: %v", path, err)
	}
	m, ok := v.(map[string]interface{})
	if !ok {
		return nil, fmt.Errorf("%s: top level is not a map", path)
	}
	return m, nil
}

// merge overlays src onto dst: maps merge key by key, anything else (lists included) replaces;
// a null in src deletes the key (helm's rule for user values).
func merge(dst, src map[string]interface{}) map[string]interface{} {
	for k, v := range src {
		if v == nil {
			delete(dst, k)
			continue
		}
		if sm, ok := v.(map[string]interface{}); ok {
			if dm, ok := dst[k].(map[string]interface{}); ok {
				dst[k] = merge(dm, sm)
				continue
			}
		}
		dst[k] = v
	}
	return dst
}

func toYAML(v interface{}) string {
	j, err := helmJSON(v)
	if err != nil {
		return ""
	}
	b, err := yamlv2.Marshal(j)
	if err != nil {
		return ""
	}
	return strings.TrimSuffix(string(b), "\n")
}

func fromYAML(s string) map[string]interface{} {
	m := map[string]interface{}{}
	var raw interface{}
	if err := yamlv3.Unmarshal([]byte(s), &raw); err != nil {
		m["Error"] = err.Error()
		return m
	}
	v, err := helmJSON(raw)
	if err != nil {
		m["Error"] = err.Error()
		return m
	}
	if mm, ok := v.(map[string]interface{}); ok {
		return mm
	}
	return m
}

type capabilities struct {
	KubeVersion map[string]string
	APIVersions apiVersions
}

type apiVersions []string

// Has: helm's Capabilities.APIVersions.Has. Only the built-in groups the chart may ask about.
func (a apiVersions) Has(v string) bool {
	for _, x := range a {
		if x == v {
			return true
		}
	}
	return false
}

func main() {
	chartDir := flag.String("chart", "charts/toposched", "chart directory")
	release := flag.String("release", "toposched", "release name")
	namespace := flag.String("namespace", "toposched-system", "release namespace")
	service := flag.String("release-service", "Helm", ".Release.Service (the managed-by label)")
	notesOut := flag.String("notes", "", "write the rendered NOTES.txt here")
	var valueFiles fileList
	flag.Var(&valueFiles, "f", "values file merged over the chart's values.yaml (repeatable)")
	flag.Parse()
	if err := run(*chartDir, *release, *namespace, *service, *notesOut, valueFiles); err != nil {
		fmt.Fprintln(os.Stderr, "render:", err)
		os.Exit(1)
	}
}

func run(chartDir, release, namespace, service, notesOut string, valueFiles []string) error {
	chartMeta, err := readYAMLMap(filepath.Join(chartDir, "Chart.yaml"))
	if err != nil {
		return err
	}
	chart := map[string]interface{}{}
	for k, v := range chartMeta { // helm exposes Chart.yaml's keys capitalised: .Chart.AppVersion
		chart[strings.ToUpper(k[:1])+k[1:]] = v
	}
	values, err := readYAMLMap(filepath.Join(chartDir, "values.yaml"))
	if err != nil {
		return err
	}
	for _, f := range valueFiles {
		overlay, err := readYAMLMap(f)
		if err != nil {
			return err
		}
		values = merge(values, overlay)
	}
	chartName, _ := chart["Name"].(string)
	top := map[string]interface{}{
		"Values": values,
		"Chart":  chart,
		"Release": map[string]interface{}{
			"Name": release, "Namespace": namespace, "Service": service,
			"IsInstall": true, "IsUpgrade": false, "Revision": 1,
		},
		"Capabilities": capabilities{
			KubeVersion: map[string]string{"Version": "v1.32.2", "Major": "1", "Minor": "32", "GitVersion": "v1.32.2"},
			APIVersions: apiVersions{"v1", "apps/v1", "policy/v1", "rbac.authorization.k8s.io/v1", "networking.k8s.io/v1", "coordination.k8s.io/v1"},
		},
		"Template": map[string]interface{}{"BasePath": chartName + "/templates"},
	}

	root := template.New("chart").Option("missingkey=zero")
	funcs := sprig.TxtFuncMap()
	delete(funcs, "env") // helm removes these: a chart must not read the renderer's environment
	delete(funcs, "expandenv")
	funcs["toYaml"] = toYAML
	funcs["fromYaml"] = fromYAML
	funcs["toJson"] = func(v interface{}) string { b, _ := json.Marshal(v); return string(b) }
	funcs["required"] = func(msg string, v interface{}) (interface{}, error) {
		if v == nil {
			return nil, fmt.Errorf("%s", msg)
		}
		if s, ok := v.(string); ok && s == "" {
			return nil, fmt.Errorf("%s", msg)
		}
		return v, nil
	}
	funcs["fail"] = func(msg string) (string, error) { return "", fmt.Errorf("%s", msg) }
	funcs["lookup"] = func(...interface{}) map[string]interface{} { return map[string]interface{}{} }
	funcs["include"] = func(name string, data interface{}) (string, error) {
		var buf bytes.Buffer
		if err := root.ExecuteTemplate(&buf, name, data); err != nil {
			return "", err
		}
		return buf.String(), nil
	}
	funcs["tpl"] = func(text string, data interface{}) (string, error) {
		t, err := root.Clone()
		if err != nil {
			return "", err
		}
		t, err = t.New("tpl").Parse(text)
		if err != nil {
			return "", err
		}
		var buf bytes.Buffer
		if err := t.Execute(&buf, data); err != nil {
			return "", err
		}
		return strings.ReplaceAll(buf.String(), "<no value>", ""), nil
	}
	root.Funcs(funcs)

	templatesDir := filepath.Join(chartDir, "templates")
	entries, err := os.ReadDir(templatesDir)
	if err != nil {
		return err
	}
	var names []string
	for _, e := range entries {
		if e.IsDir() {
			continue
		}
		data, err := os.ReadFile(filepath.Join(templatesDir, e.Name()))
		if err != nil {
			return err
		}
		name := chartName + "/templates/" + e.Name()
		if _, err := root.New(name).Parse(string(data)); err != nil {
			return err
		}
		names = append(names, e.Name())
	}
	sort.Strings(names)

	var out strings.Builder
	for _, n := range names {
		if strings.HasPrefix(n, "_") {
			continue
		}
		name := chartName + "/templates/" + n
		var buf bytes.Buffer
		top["Template"].(map[string]interface{})["Name"] = name
		if err := root.ExecuteTemplate(&buf, name, top); err != nil {
			return err
		}
		text := strings.ReplaceAll(buf.String(), "<no value>", "")
		if n == "NOTES.txt" {
			if notesOut != "" {
				if err := os.WriteFile(notesOut, []byte(text), 0o644); err != nil {
					return err
				}
			}
			continue
		}
		// Split like helm: each "---" document separately, dropping empty ones.
		for _, doc := range strings.Split(text, "\n---") {
			if strings.TrimSpace(doc) == "" || strings.TrimSpace(stripComments(doc)) == "" {
				continue
			}
			doc = strings.TrimPrefix(doc, "---")
			doc = strings.TrimLeft(doc, "\n")
			fmt.Fprintf(&out, "---\n# Source: %s\n%s\n", name, strings.TrimRight(doc, "\n "))
		}
	}
	_, err = os.Stdout.WriteString(out.String())
	return err
}

// stripComments drops comment-only lines: a document of comments alone is not an object.
func stripComments(doc string) string {
	var keep []string
	for _, line := range strings.Split(doc, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "#") {
			continue
		}
		keep = append(keep, line)
	}
	return strings.Join(keep, "\n")
}
