package receipts

// RememberAll makes rp keep every record's uses and every run id, for
// tests that hold a replay that forgets (ADR 0053) to one that does not.
func RememberAll(rp *Replayer) { rp.rememberAll = true }

// RunIDTime is runIDTime, for tests.
var RunIDTime = runIDTime
