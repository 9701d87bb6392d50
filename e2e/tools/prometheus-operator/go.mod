// Pins the Prometheus Operator whose CRDs (ServiceMonitor, PrometheusRule) the e2e control plane
// installs, so that the chart's monitoring objects are validated server-side like every other
// object. No Go package is built from it: e2e/build-peers.sh copies
// example/prometheus-operator-crd/ out of the module. `go mod tidy` would drop the requirement
// (nothing imports it); change the version here and run `go mod download` for go.sum.
module toposched.io/e2e/tools/prometheus-operator

go 1.26.0

require github.com/prometheus-operator/prometheus-operator v0.85.0
