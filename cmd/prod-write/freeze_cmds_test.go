package main

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"

	"github.com/rogpeppe/go-internal/testscript"
)

// cmdHistorize keeps the current trust.toml in the replay history, as
// docs/REPLAY.md says to before changing it:
//
//	historize
func cmdHistorize(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 0 {
		ts.Fatalf("usage: historize")
	}
	data, err := os.ReadFile(ts.MkAbs("trust.toml"))
	ts.Check(err)
	sum := sha256.Sum256(data)
	dir := ts.MkAbs(filepath.Join("history", "trust"))
	ts.Check(os.MkdirAll(dir, 0o755))
	ts.Check(os.WriteFile(filepath.Join(dir, "sha256-"+hex.EncodeToString(sum[:])+".toml"), data, 0o644))
}
