// Command etcd is the etcd server built from go.etcd.io/etcd/server/v3, the same way the
// upstream etcd binary's main wraps etcdmain. Debian's etcd is too old for current
// kube-apiserver releases.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
