// Command etcd is upstream etcd's server entry point, built at the version
// pinned by this module so the dev control plane needs no release download.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
