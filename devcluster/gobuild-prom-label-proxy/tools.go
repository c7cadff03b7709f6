//go:build tools

// Package tools pins the command build.sh builds from this module: prom-label-proxy.
package tools

import _ "github.com/prometheus-community/prom-label-proxy"
