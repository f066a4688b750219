// Package admin holds the host's administration calls: init, setup
// service, keygen, key public, store init, archive init, receipts sync,
// history record and doctor. Each takes a typed request and returns a
// typed result, and knows no cobra and no terminal: pkg/cli reads the
// flags into a request and renders the result, as it does for the calls
// of the application API (pkg/api).
//
// None of them is a call of that API. The runner service answers none of
// them: each acts on this host with the caller's own rights (writing its
// layout, making its keys, creating its table and bucket), and none has a
// front end but the CLI (docs/adr/0055-administration-calls.md).
package admin
