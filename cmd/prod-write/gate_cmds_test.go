package main

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/rogpeppe/go-internal/testscript"
)

// cmdCorruptEvidence cuts every stored evidence record of FP to half its
// length, as a torn write or a failing disk would leave it:
//
//	corruptevidence $FP
func cmdCorruptEvidence(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 1 || !strings.HasPrefix(args[0], "sha256:") {
		ts.Fatalf("usage: corruptevidence FP")
	}
	files, err := filepath.Glob(ts.MkAbs(filepath.Join("state/store/evidence", strings.TrimPrefix(args[0], "sha256:"), "*.json")))
	ts.Check(err)
	if len(files) == 0 {
		ts.Fatalf("corruptevidence: no evidence stored for %s", args[0])
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		ts.Check(err)
		ts.Check(os.WriteFile(f, b[:len(b)/2], 0o600))
	}
}

// cmdPrefix sets VAR to the first N hex digits of fingerprint FP:
//
//	prefix SHORT $FP 12
func cmdPrefix(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 3 {
		ts.Fatalf("usage: prefix VAR FP N")
	}
	n, err := strconv.Atoi(args[2])
	ts.Check(err)
	h := strings.TrimPrefix(args[1], "sha256:")
	if n > len(h) {
		ts.Fatalf("prefix: %s has fewer than %d digits", args[1], n)
	}
	ts.Setenv(args[0], h[:n])
}
