package localapi

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/prod-write/prod-write/pkg/bridge"
	"github.com/prod-write/prod-write/pkg/bridge/approvalpage"
	"github.com/prod-write/prod-write/pkg/config"
	"github.com/prod-write/prod-write/pkg/mcpapi"
	"github.com/prod-write/prod-write/pkg/store"
	"github.com/prod-write/prod-write/receipts"
)

// AWS is what the commands need of the distributed backends (docs/DESIGN.md §10):
// the DynamoDB store and the S3 receipt archive. They link the AWS SDK,
// whose package initialisation alone costs more than the whole of a run's
// durable writes, so they live in a second binary, prod-write-net, and
// prod-write hands a command over to it when the configuration names them
// (docs/adr/0009-aws-binary.md). pkg/awsbackend implements it.
type AWS interface {
	// OpenStore opens the DynamoDB store c names. Its errors from
	// DynamoDB are refusals (store_unavailable): the gate fails closed.
	OpenStore(c *config.Config) (store.Store, error)
	// InitStore creates c's DynamoDB table, or finds it, and waits until
	// it is ACTIVE.
	InitStore(ctx context.Context, c *config.Config, wait time.Duration) (table string, created bool, err error)
	// InitArchive creates c's archive bucket with object lock and the
	// default retention c's lock mode and days give, or finds it so. A
	// bucket it cannot vouch for is a *config.Error.
	InitArchive(ctx context.Context, c *config.Config) (created bool, err error)
	// ShipReceipts copies journal entries to c's archive.
	ShipReceipts(ctx context.Context, c *config.Config, entries []receipts.Appended) error
	// SyncReceipts ships every complete journal line c's archive lacks.
	// A line the archive holds with other bytes is an error wrapping
	// [ErrArchiveConflict].
	SyncReceipts(ctx context.Context, c *config.Config, journal *os.File) (ArchiveSync, error)
	// OpenArchive reads the archive at url (s3://bucket/prefix) as one
	// journal. c is nil when there is no configuration; when there is and
	// its archive names the same bucket, its endpoint and region apply.
	OpenArchive(ctx context.Context, c *config.Config, url string) (io.ReadCloser, error)
	// ArchiveChains lists the journals held at url, as s3://bucket/prefix
	// URLs in key order: one per prefix that directly holds receipts (url
	// itself, for one host's prefix; each host's, for their parent). An
	// empty list is not an error. c is as for OpenArchive.
	ArchiveChains(ctx context.Context, c *config.Config, url string) ([]string, error)
	// SecretSource reads the runner service's production secrets from SSM
	// Parameter Store, as c's [service] secrets says.
	SecretSource(c *config.Config) (func(ctx context.Context, name string) (string, error), error)
}

// ArchiveSync is what [AWS.SyncReceipts] did.
type ArchiveSync struct {
	URL     string // the archive, as s3://bucket/prefix
	Lines   int    // complete journal lines read
	Shipped int    // objects written now
	Present int    // lines the archive held already
}

// ErrArchiveConflict is wrapped by a sync that found a journal line's
// sequence number in the archive with other bytes.
var ErrArchiveConflict = errors.New("the archive holds other bytes for a journal entry")

// Net is what the commands need of the network besides AWS: the Slack and
// GitHub bridges and the MCP server. Their libraries link net/http, TLS and
// crypto/x509, which prod-write (the binary that runs production writes,
// often with privilege) does without: like [AWS], they live in
// prod-write-net (docs/adr/0010-network-binary.md). pkg/netbackend
// implements it.
type Net interface {
	// SlackPoster posts decisions to b's Slack channel with token.
	SlackPoster(b config.Bridge, token bridge.Secret) bridge.Poster
	// GitHubPoster posts decisions to b's GitHub repository with token; a
	// repository or API address it cannot use is an error.
	GitHubPoster(b config.Bridge, token bridge.Secret) (bridge.Poster, error)
	// ServeBridge runs bridge serve's services until ctx is done or one
	// of them fails.
	ServeBridge(ctx context.Context, s *BridgeService) error
	// ServeMCP serves b's tools over MCP on in and out until in ends.
	ServeMCP(ctx context.Context, b mcpapi.Backend, allowRun bool, in io.Reader, out io.Writer) error
	// ServeMCPHTTP serves MCP over Streamable HTTP as s, the service's
	// configuration, says: on s.MCPListen, the bearer tokens of the file
	// s.MCPTokens mapping to principals, each principal limited to
	// s.MCPRate and s.MCPBurst; backendFor gives the backend acting for
	// one (the runner service's). Each MCP call joins calls, the
	// service's, whose stop closes the listener (ADR 0031); ctx is done
	// once the service has no call left, and ServeMCPHTTP then writes the
	// last answers, shuts down and returns. It calls ready, when not nil,
	// once everything is checked and it listens: an error before that is
	// the configuration's.
	ServeMCPHTTP(ctx context.Context, s config.Service, backendFor func(principal string) (mcpapi.Backend, error), calls mcpapi.Calls, log *slog.Logger, ready func()) error
	// MCPTokens reads and edits MCP over HTTP's tokens file (`prod-write
	// mcp token`), by the parser the service loads it with.
	MCPTokens() mcpapi.TokensFile
}

// NetBinary is the name of the binary that links [AWS] and [Net].
const NetBinary = "prod-write-net"

// BridgeService is what bridge serve runs, checked and loaded: [Net]
// serves it.
type BridgeService struct {
	Bridge   config.Bridge
	Attestor *bridge.Attestor
	Ledger   *bridge.Ledger
	Log      *slog.Logger
	// With the Slack bridge on: the secrets that verify Slack's requests
	// and answer them.
	SlackSigning, SlackToken bridge.Secret
	// With the GitHub bridge on: its token and how often it polls.
	GitHubToken bridge.Secret
	GitHubPoll  time.Duration
	// GitHubWebhookSecret verifies GitHub's webhook deliveries; empty when
	// github_webhook_secret_file is not set (polling only).
	GitHubWebhookSecret bridge.Secret
	// Requests are the reminder and escalation rules of [requests];
	// CheckEvery how often open requests are looked at; Events where
	// what was done about them is recorded.
	Requests   bridge.Settings
	CheckEvery time.Duration
	Events     *bridge.Events
	// Page is the approval page, served on Bridge.PageListen; nil when
	// page_listen is not set.
	Page *approvalpage.Server
	// Now is the service's clock.
	Now func() time.Time
	// Live is the policy and registry the Slack and GitHub bridges judge
	// by: the runner service's reload sets it.
	Live *bridge.Live
}
