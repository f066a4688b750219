package netbackend

import (
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"

	"github.com/prod-write/prod-write/pkg/keys"
)

// maxTLSFile bounds a certificate chain or key file read for MCP over
// HTTPS: a chain of a few certificates is some KiB.
const maxTLSFile = 1 << 20

// mcpTLSConfig is MCP over HTTPS's TLS configuration from [service]
// mcp_tls_cert and mcp_tls_key (docs/adr/0047-mcp-http-limits-tls-origin-body.md).
// The key file must be a regular file owned by the service's account that
// no other account may read or write, as prod-write's other key files
// (pkg/keys): whoever reads it can be the service to every client. It is
// read once, at start; a renewed certificate is served after a restart.
func mcpTLSConfig(certPath, keyPath string) (*tls.Config, error) {
	keyPEM, err := readServiceKey(keyPath)
	if err != nil {
		return nil, fmt.Errorf("service.mcp_tls_key: %w", err)
	}
	certPEM, err := readBounded(certPath)
	if err != nil {
		return nil, fmt.Errorf("service.mcp_tls_cert: %w", err)
	}
	// X509KeyPair's errors say what does not fit, never the key's bytes.
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("service.mcp_tls_cert %s and service.mcp_tls_key %s: %w", certPath, keyPath, err)
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}, nil
}

// readServiceKey reads a private key file that only the service's account
// may read: a regular file owned by the effective user, with no access for
// its group or others. Its checks are of the file opened, not of its path:
// a symbolic link (certbot's live/ directory is made of them) is judged by
// the file it leads to.
func readServiceKey(path string) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOCTTY, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file", path)
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return nil, &keys.InsecureError{Path: path, Mode: fi.Mode(), What: "read or write"}
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); !ok || int(st.Uid) != os.Geteuid() {
		return nil, fmt.Errorf("%s is not owned by the service's account (uid %d): chown it to that account", path, os.Geteuid())
	}
	return readAllBounded(f, path)
}

func readBounded(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return readAllBounded(f, path)
}

func readAllBounded(f *os.File, path string) ([]byte, error) {
	data, err := io.ReadAll(io.LimitReader(f, maxTLSFile+1))
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	if len(data) > maxTLSFile {
		return nil, fmt.Errorf("%s: %w", path, errTLSFileTooLarge)
	}
	return data, nil
}

var errTLSFileTooLarge = errors.New("over 1 MiB: no certificate chain or key is so large")
