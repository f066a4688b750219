// Command minimal is the least a run client written in Go could do before
// it sends a run, for the run-parts row of prod-write-bench: with no
// package of prod-write's, it reads the socket's path from a TOML file
// with BurntSushi/toml, installs the relay of ^C and kill, and encodes a
// request as JSON.
//
//	minimal PATH
package main

import (
	"encoding/json"
	"os"
	"os/signal"
	"syscall"

	"github.com/BurntSushi/toml"
)

func main() {
	signal.Notify(make(chan os.Signal, 4), syscall.SIGINT, syscall.SIGTERM)
	var c struct{ Service struct{ Socket string } }
	if _, err := toml.DecodeFile(os.Args[1], &c); err != nil || c.Service.Socket == "" {
		os.Exit(1)
	}
	if _, err := json.Marshal(struct {
		Op          string `json:"op"`
		Fingerprint string `json:"fingerprint"`
	}{"run", os.Args[1]}); err != nil {
		os.Exit(1)
	}
}
