// Command client is the run client's start in parts, for the run-parts row
// of prod-write-bench: it links and initialises what prod-write's run
// client does (pkg/fastrun), then does none, one or both of the two things
// the client does before it sends a run (pkg/fastrun.Try): install the
// relay of ^C and kill, and read the configuration that names the socket.
//
//	client none | signals | config PATH | both PATH
package main

import (
	"os"
	"os/signal"
	"syscall"

	"github.com/prod-write/prod-write/pkg/config"
	_ "github.com/prod-write/prod-write/pkg/fastrun" // the client's packages
)

func main() {
	mode := os.Args[1]
	if mode == "signals" || mode == "both" {
		signal.Notify(make(chan os.Signal, 4), syscall.SIGINT, syscall.SIGTERM)
	}
	if mode == "config" || mode == "both" {
		c, err := config.Load(os.Args[2])
		if err != nil || c.Service.Socket == "" {
			os.Exit(1)
		}
	}
}
