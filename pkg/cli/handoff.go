package cli

import (
	"github.com/prod-write/prod-write/pkg/localapi"
)

// The backends the commands reach through prod-write-net (pkg/localapi).
type (
	AWS           = localapi.AWS
	Net           = localapi.Net
	ArchiveSync   = localapi.ArchiveSync
	BridgeService = localapi.BridgeService
)

// ErrArchiveConflict is localapi.ErrArchiveConflict.
var ErrArchiveConflict = localapi.ErrArchiveConflict

// NetBinary is the name of the binary that links [AWS] and [Net].
const NetBinary = localapi.NetBinary
