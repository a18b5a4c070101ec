// etcd for the end-to-end tests: the upstream server's own entry point, nothing else.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
