// Package deploy holds the tests of what deploys cdcjoin: the Helm chart and the
// Kubernetes manifests rendered from it (deploy/kubernetes), the Grafana dashboard
// (deploy/grafana) and docker-compose.yml. It is a Go module of its own so that
// the libraries those tests use (Helm, the Kubernetes API types, the Prometheus
// query parser, the Compose loader: hundreds of modules) stay out of cdcjoin's
// go.mod, its go.sum and its binary.
package deploy
