// Command empty is a Go program that does nothing: the cost of starting
// and ending a Go process, the first part of the run-parts row of
// prod-write-bench.
package main

func main() {}
