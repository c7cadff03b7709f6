//go:build tools

// Package tools pins the command build.sh builds from this module: metrics-server, which serves the
// metrics.k8s.io API (`kubectl top`) through the API server's aggregation layer.
package tools

import _ "sigs.k8s.io/metrics-server/cmd/metrics-server"
