package runner

// SetLockContended sets the hook told when a run is about to wait for a
// credential's sign-count lock (signcount.go), until the test ends.
func SetLockContended(t interface{ Cleanup(func()) }, f func(path string, process bool)) {
	lockContended = f
	t.Cleanup(func() { lockContended = nil })
}
