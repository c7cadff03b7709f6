//go:build tools

// Package tools pins the command build.sh builds from this module: kine.
package tools

import _ "github.com/k3s-io/kine/pkg/app"
