package api

import "time"

// VerifyVSARequest verifies a VSA that replay --vsa wrote (VSA, a file)
// against the journal file it is about and CI's public key (Pub: as
// trust.toml spells it, or a file holding that line or a PKIX PEM key).
// Offline: nothing of the service's is read.
type VerifyVSARequest struct {
	VSA     string `json:"vsa"`
	Journal string `json:"journal"`
	Pub     string `json:"pub"`
}

// VerifyVSAResult is what the verified VSA says.
type VerifyVSAResult struct {
	VSA          string `json:"vsa"`
	Journal      string `json:"journal"`
	Verified     bool   `json:"verified"`
	Result       string `json:"result"`
	Subject      string `json:"subject"`
	Head         string `json:"head"`
	Entries      int    `json:"entries"`
	Policy       string `json:"policy"`
	TimeVerified string `json:"time_verified"`
	KeyID        string `json:"key_id"`
}

// VerifyExportRequest verifies a bundle receipts export wrote (Export, a
// file) under the runner's public key (Pub, as for VerifyVSARequest).
type VerifyExportRequest struct {
	Export string `json:"export"`
	Pub    string `json:"pub"`
	// Witnesses, when above 0, is how many witnesses of the trust policy
	// at Trust ([[witness]]) must cosign each bundle's checkpoint;
	// WitnessMaxAge, when set, counts only cosignatures made within it of
	// now.
	Trust         string        `json:"trust,omitempty"`
	Witnesses     int           `json:"witnesses,omitempty"`
	WitnessMaxAge time.Duration `json:"witness_max_age,omitempty"`
}

// VerifyExportResult is what the verified bundle holds.
type VerifyExportResult struct {
	Export   string `json:"export"`
	Verified bool   `json:"verified"`
	Runs     int    `json:"runs"`
	Proved   int    `json:"proved"`
	TreeSize uint64 `json:"tree_size"`
	KeyID    string `json:"key_id"`
	// Witnessed is the fewest witnesses that cosigned a bundle's
	// checkpoint, when Witnesses asked for them.
	Witnessed int `json:"witnessed,omitempty"`
}

// VerifyConsistencyRequest verifies a consistency proof (Proof, a file
// receipts consistency --json wrote) between two checkpoint notes (Old
// and New, their text), each under a runner key of the trust policy at
// Trust. Offline: no journal is read.
type VerifyConsistencyRequest struct {
	Old   string `json:"old"`
	New   string `json:"new"`
	Proof string `json:"proof"`
	Trust string `json:"trust"`
}

// VerifyConsistencyResult is what the verified proof says.
type VerifyConsistencyResult struct {
	FormatVersion int    `json:"format_version"`
	Verified      bool   `json:"verified"`
	Origin        string `json:"origin"`
	OldSize       uint64 `json:"old_size"`
	NewSize       uint64 `json:"new_size"`
}
