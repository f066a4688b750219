package admin

import (
	"os"
	"path/filepath"
	"time"

	"github.com/prod-write/prod-write/approval"
	"github.com/prod-write/prod-write/pkg/localapi"
	"github.com/prod-write/prod-write/receipts"
)

// HistoryRecordRequest is history record's. Trust and Registry default to
// the configured ones, History to history/ beside the trust policy.
type HistoryRecordRequest struct {
	Trust    string
	Registry string
	History  string
	// Rollout is how long a replaced version still counts.
	Rollout time.Duration
}

// HistoryRecordResult is what history record changed, as its --json
// prints it.
type HistoryRecordResult struct {
	FormatVersion int               `json:"format_version"`
	History       string            `json:"history"`
	Changes       []receipts.Change `json:"changes"`
}

// HistoryRecord records the current trust policy and operation
// definitions in the history, with when they came into force
// (receipts.RecordHistory). With nothing changed, it writes nothing.
func HistoryRecord(env *localapi.Env, req HistoryRecordRequest) (*HistoryRecordResult, error) {
	if req.Rollout < 0 {
		return nil, &localapi.UsageError{Msg: "--rollout must not be negative"}
	}
	trust, registry := req.Trust, req.Registry
	if trust == "" || registry == "" {
		c, err := env.Config()
		if err != nil {
			return nil, err
		}
		if trust == "" {
			trust = c.Trust
		}
		if registry == "" {
			registry = c.Registry
		}
	}
	data, err := os.ReadFile(trust)
	if err != nil {
		return nil, approval.PolicyReadError(trust, err)
	}
	if _, err := approval.ParsePolicy(trust, data); err != nil {
		return nil, err
	}
	defs, err := localapi.ReadDefinitions(registry)
	if err != nil {
		return nil, err
	}
	dir := req.History
	if dir == "" {
		dir = filepath.Join(filepath.Dir(trust), "history")
	}
	changes, err := receipts.RecordHistory(dir, data, defs, env.Now(), req.Rollout)
	if err != nil {
		return nil, err
	}
	return &HistoryRecordResult{FormatVersion: localapi.FormatVersion, History: dir, Changes: localapi.NonNil(changes)}, nil
}
