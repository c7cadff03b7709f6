//go:build tools

// Package tools pins the Alertmanager release build.sh builds (from that release's own go.mod, see
// build_alertmanager): the version here is the one the dev cluster runs.
package tools

import _ "github.com/prometheus/alertmanager/cmd/alertmanager"
