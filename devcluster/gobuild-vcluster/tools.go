//go:build tools

// Package tools pins the command build.sh builds from this module: vcluster's syncer.
package tools

import _ "github.com/loft-sh/vcluster/cmd/vcluster/cmd"
