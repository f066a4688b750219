package main

import (
	"bytes"
	"fmt"
	"os/exec"
	"regexp"
	"sort"
	"strconv"
	"time"
)

// benchPasskey is issue 30's gate row: the gate verifying a passkey
// decision (the bridge's ed25519 signature, the WebAuthn assertion's
// P-256 signature, its challenge, origin, RP ID and flags) against the
// same gate verifying a plain ed25519-signed approval of the same plan,
// goal ≤ 2×; and beside it one bare ed25519 verification. The work is
// approval's BenchmarkPasskeyVerify (which builds both decisions with a
// software authenticator and checks each passes the gate), run here in
// interleaved rounds; each figure is the median round's.
func benchPasskey(string) result {
	out, err := exec.Command("go", "test", "./approval", "-run", "^$", "-bench", "^BenchmarkPasskeyVerify$", "-benchtime", "3000x", "-count", "5").CombinedOutput()
	if err != nil {
		fail(fmt.Errorf("go test -bench BenchmarkPasskeyVerify: %v\n%s", err, out))
	}
	line := regexp.MustCompile(`(?m)^BenchmarkPasskeyVerify/(\S+?)(?:-\d+)?\s+\d+\s+([0-9.]+) ns/op`)
	got := map[string][]float64{}
	for _, m := range line.FindAllSubmatch(out, -1) {
		ns, err := strconv.ParseFloat(string(m[2]), 64)
		if err != nil {
			fail(err)
		}
		got[string(m[1])] = append(got[string(m[1])], ns)
	}
	med := func(name string) float64 {
		v := got[name]
		if len(v) == 0 {
			fail(fmt.Errorf("no %s row in:\n%s", name, bytes.TrimSpace(out)))
		}
		sort.Float64s(v)
		return v[len(v)/2]
	}
	pk, ed, bare := med("gate/passkey"), med("gate/ed25519"), med("ed25519_only")
	r := result{name: "gate passkey / gate ed25519 approval", ratio: pk / ed, goal: "≤ 2.0"}
	r.met = r.ratio <= 2.0
	r.extra = []string{
		fmt.Sprintf("gate with a passkey approval %v, with an ed25519 approval %v, one bare ed25519 verification %v (median of %d rounds)",
			time.Duration(pk).Round(time.Microsecond), time.Duration(ed).Round(time.Microsecond), time.Duration(bare).Round(time.Microsecond), len(got["gate/passkey"])),
		fmt.Sprintf("gate with a passkey approval / one bare ed25519 verification: %.2f×", pk/bare),
	}
	fmt.Printf("passkey: %s\n", r.extra[0])
	return r
}
