package admin

import (
	"errors"
	"fmt"
	"os"

	"github.com/prod-write/prod-write/pkg/keys"
	"github.com/prod-write/prod-write/pkg/localapi"
)

// KeyResult is a key's public half: what keygen made and key public
// read, as their --json prints it.
type KeyResult struct {
	FormatVersion int    `json:"format_version"`
	KeyID         string `json:"key_id"`
	Path          string `json:"path"`
	// PEM is the PKIX PEM public key; key public's only.
	PEM       string `json:"pem,omitempty"`
	PublicKey string `json:"public_key"`
}

// Keygen writes a new ed25519 private key to out with mode 0600, never
// overwriting anything.
func Keygen(out string) (*KeyResult, error) {
	if out == "" {
		return nil, &localapi.UsageError{Msg: "keygen needs --out FILE"}
	}
	k, err := keys.Generate()
	if err != nil {
		return nil, err
	}
	if err := k.WriteNew(out); err != nil {
		if errors.Is(err, os.ErrExist) {
			return nil, &localapi.DataError{Err: fmt.Errorf("%s exists; keygen never overwrites a key", out)}
		}
		return nil, fmt.Errorf("writing key: %w", err)
	}
	p := k.Public()
	return &KeyResult{FormatVersion: localapi.FormatVersion, KeyID: p.ID(), Path: out, PublicKey: p.String()}, nil
}

// KeyPublic reads the private key file and returns its public half.
func KeyPublic(file string) (*KeyResult, error) {
	k, err := keys.Load(file)
	if err != nil {
		return nil, fmt.Errorf("reading key: %w", err)
	}
	p := k.Public()
	return &KeyResult{FormatVersion: localapi.FormatVersion, KeyID: p.ID(), PEM: string(p.PEM()), Path: file, PublicKey: p.String()}, nil
}
