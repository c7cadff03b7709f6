// Command coredns is upstream CoreDNS with only the plugins a cluster DNS needs compiled in (CoreDNS's
// "external plugin" build: core/dnsserver, the plugin packages, coremain.Run), so a cold build skips the
// cloud providers' SDKs (route53, azure, clouddns), etcd, dnstap and the rest.
//
// The plugins are kubeadm's default Corefile's (errors, health, ready, kubernetes, prometheus, forward,
// cache, loop, reload, loadbalance), vcluster's CoreDNS's (hosts, rewrite), and log and template for
// debugging; they pull in debug, dnstap, metadata and transfer. A Corefile naming any other plugin fails at
// start with "unknown directive" (`coredns -plugins` lists what is compiled in).
package main

import (
	"slices"

	"github.com/coredns/caddy"
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/forward"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/hosts"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/loadbalance"
	_ "github.com/coredns/coredns/plugin/log"
	_ "github.com/coredns/coredns/plugin/loop"
	_ "github.com/coredns/coredns/plugin/metrics"
	_ "github.com/coredns/coredns/plugin/ready"
	_ "github.com/coredns/coredns/plugin/reload"
	_ "github.com/coredns/coredns/plugin/rewrite"
	_ "github.com/coredns/coredns/plugin/template"
)

func init() {
	// Upstream's order (the order plugins see a query in) filtered to the plugins registered by the imports
	// above (they register in their own init, which runs before this one); caddy names them "dns.<name>".
	registered := caddy.ListPlugins()["others"]
	dnsserver.Directives = slices.DeleteFunc(dnsserver.Directives, func(name string) bool {
		return !slices.Contains(registered, "dns."+name)
	})
}

func main() {
	coremain.Run()
}
