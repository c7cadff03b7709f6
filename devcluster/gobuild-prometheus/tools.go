//go:build tools

// Package tools pins the promtool command this module builds.
package tools

import (
	_ "github.com/prometheus/prometheus/cmd/promtool"
)
