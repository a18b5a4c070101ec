// The pause program of the test node's pod sandboxes (containerd's sandbox_image, built into a
// one-file image by .ci/build-image): it holds the pod's namespaces until it is told to stop, as
// registry.k8s.io/pause does, and reaps the zombies it inherits when it is PID 1 of a pod that
// shares its process namespace. No registry is reachable here, so the project builds its own.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	signals := make(chan os.Signal, 8)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for sig := range signals {
		if sig != syscall.SIGCHLD {
			return
		}
		for {
			pid, err := syscall.Wait4(-1, nil, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
