// Command bench-replay replays the Alibaba PAI GPU trace through gpuhub's decision code and the anchors
// (benchmark B4, services/replay/README.md).
package main

import (
	"os"

	"github.com/gpuhub/gpuhub/services/replay"
)

func main() { os.Exit(replay.Main(os.Args[1:], os.Stdout, os.Stderr)) }
