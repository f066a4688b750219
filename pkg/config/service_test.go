package config_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/prod-write/prod-write/pkg/config"
)

// MCP over HTTP's rate limit and TLS files are read from [service]: a
// value set is kept as written (0 is the default of MCP over HTTP), one
// that would turn the limit off or that is half a TLS pair fails at load.
func TestServiceMCPRateAndTLS(t *testing.T) {
	c, err := config.Parse("/etc/pw/prod-write.toml", []byte("[service]\nmcp_rate = 0.5\nmcp_burst = 3\nmcp_tls_cert = \"tls/cert.pem\"\nmcp_tls_key = \"/etc/pw/tls/key.pem\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	if c.Service.MCPRate != 0.5 || c.Service.MCPBurst != 3 {
		t.Errorf("mcp_rate %v, mcp_burst %d: want 0.5 and 3", c.Service.MCPRate, c.Service.MCPBurst)
	}
	if c.Service.MCPTLSCert != "/etc/pw/tls/cert.pem" || c.Service.MCPTLSKey != "/etc/pw/tls/key.pem" {
		t.Errorf("mcp_tls_cert %q, mcp_tls_key %q: want both resolved against /etc/pw", c.Service.MCPTLSCert, c.Service.MCPTLSKey)
	}
	c, err = config.Parse("/etc/pw/prod-write.toml", []byte("[service]\nmcp_rate = 12\n"))
	if err != nil {
		t.Fatal(err)
	}
	if c.Service.MCPRate != 12 || c.Service.MCPBurst != 0 {
		t.Errorf("an integer rate: mcp_rate %v, mcp_burst %d, want 12 and 0", c.Service.MCPRate, c.Service.MCPBurst)
	}

	for _, tc := range []struct{ src, want string }{
		{"[service]\nmcp_rate = -1\n", "service.mcp_rate -1: want a finite number"},
		{"[service]\nmcp_rate = nan\n", "service.mcp_rate NaN: want a finite number"},
		{"[service]\nmcp_rate = inf\n", "service.mcp_rate +Inf: want a finite number"},
		{"[service]\nmcp_burst = -1\n", "service.mcp_burst -1: want 1 to"},
		{"[service]\nmcp_burst = 1048577\n", "service.mcp_burst 1048577: want 1 to"},
		{"[service]\nmcp_rate = \"10/s\"\n", "service.mcp_rate must be a number, not a string"},
		{"[service]\nmcp_tls_cert = \"cert.pem\"\n", "service.mcp_tls_cert and service.mcp_tls_key go together"},
		{"[service]\nmcp_tls_key = \"key.pem\"\n", "service.mcp_tls_cert and service.mcp_tls_key go together"},
	} {
		_, err := config.Parse("/etc/pw/prod-write.toml", []byte(tc.src))
		var ce *config.Error
		if !errors.As(err, &ce) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: error %v, want one saying %q", tc.src, err, tc.want)
		}
	}
}
