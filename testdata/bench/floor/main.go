// Command floor is the physical limit of `prod-write run` (docs/DESIGN.md §15): a
// minimal Go program that makes two durable writes (write, fsync the file,
// fsync the directory) around running the same program.
package main

import (
	"os"
	"os/exec"
	"path/filepath"
)

func durable(dir, name string, data []byte) {
	f, err := os.OpenFile(filepath.Join(dir, name), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		panic(err)
	}
	if _, err := f.Write(data); err != nil {
		panic(err)
	}
	if err := f.Sync(); err != nil {
		panic(err)
	}
	f.Close()
	d, err := os.Open(dir)
	if err != nil {
		panic(err)
	}
	if err := d.Sync(); err != nil {
		panic(err)
	}
	d.Close()
}

func main() {
	dir, prog := os.Args[1], os.Args[2]
	durable(dir, "intent", []byte("intent\n"))
	cmd := exec.Command(prog)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	err := cmd.Run()
	durable(dir, "outcome", []byte("outcome\n"))
	if err != nil {
		os.Exit(1)
	}
}
