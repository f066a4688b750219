package testservers

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/chromedp/cdproto/webauthn"
	"github.com/chromedp/chromedp"
)

// ChromiumPath is Debian's chromium (scripts/test-deps.sh installs it).
const ChromiumPath = "/usr/bin/chromium"

// Chromium is a headless Debian chromium, driven by chromedp over the
// DevTools protocol, with the protocol's virtual authenticator (CTAP2,
// internal transport, resident keys, user verification, presence
// simulated) holding no credential yet: an approver's browser and device
// for the approval page's tests.
type Chromium struct {
	// Ctx is the browser's context (Within bounds each use).
	Ctx context.Context
	// Authenticator is the virtual authenticator's id.
	Authenticator webauthn.AuthenticatorID
	stop          func()
}

// StartChromium starts it, accepting a TLS certificate whose key's SPKI
// hash (base64 sha256) is spki, with a profile in a directory of its own.
// Stop ends it.
func StartChromium(spki string) (*Chromium, error) {
	dir, err := os.MkdirTemp("", "prod-write-chromium-")
	if err != nil {
		return nil, err
	}
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(ChromiumPath),
		chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("ignore-certificate-errors-spki-list", spki),
		chromedp.UserDataDir(dir),
	)
	ctx, cancel := chromedp.NewContext(alloc)
	c := &Chromium{Ctx: ctx, stop: func() { cancel(); cancelAlloc(); os.RemoveAll(dir) }}
	if err := chromedp.Do(ctx); err != nil {
		c.Stop()
		return nil, fmt.Errorf("starting chromium: %w", err)
	}
	if _, err := chromedp.Call(ctx, webauthn.Enable, webauthn.EnableParams{}); err != nil {
		c.Stop()
		return nil, fmt.Errorf("WebAuthn.enable: %w", err)
	}
	va, err := chromedp.Call(ctx, webauthn.AddVirtualAuthenticator, webauthn.AddVirtualAuthenticatorParams{Options: &webauthn.VirtualAuthenticatorOptions{
		Protocol: webauthn.AuthenticatorProtocolCtap2, Ctap2version: webauthn.Ctap2versionCtap21, Transport: webauthn.AuthenticatorTransportInternal,
		HasResidentKey: true, HasUserVerification: true, IsUserVerified: true, AutomaticPresenceSimulation: true,
		// The generated Credential always sends generateCmtgKeyOnNextOperation,
		// which an authenticator without the extension refuses.
		HasCmtgKey: true,
	}})
	if err != nil {
		c.Stop()
		return nil, fmt.Errorf("WebAuthn.addVirtualAuthenticator: %w", err)
	}
	c.Authenticator = va.AuthenticatorID
	return c, nil
}

// Within is the browser's context, bounded by d.
func (c *Chromium) Within(d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(c.Ctx, d)
}

// Stop ends the browser and removes its profile.
func (c *Chromium) Stop() { c.stop() }
