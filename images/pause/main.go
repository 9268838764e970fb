// Command pause is what every pod's sandbox container runs on the real node (containerd's sandbox_image):
// it holds the pod's namespaces, reaps the zombies it inherits, and exits on SIGINT or SIGTERM. It stands in
// for registry.k8s.io/pause, which cannot be pulled here; `pause -v` prints its version.
package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

const version = "0.1.0"

func main() {
	if len(os.Args) > 1 && os.Args[1] == "-v" {
		fmt.Println("pause (gpuhub)", version)
		return
	}
	sig := make(chan os.Signal, 8)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for s := range sig {
		if s != syscall.SIGCHLD {
			return
		}
		for {
			var status syscall.WaitStatus
			if pid, err := syscall.Wait4(-1, &status, syscall.WNOHANG, nil); pid <= 0 || err != nil {
				break
			}
		}
	}
}
