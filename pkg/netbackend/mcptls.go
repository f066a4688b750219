package netbackend

import (
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/prod-write/prod-write/pkg/keys"
)

// maxTLSFile bounds a certificate chain or key file read for MCP over
// HTTPS: a chain of a few certificates is some KiB.
const maxTLSFile = 1 << 20

// mcpTLSConfig is MCP over HTTPS's TLS configuration from [service]
// mcp_tls_cert and mcp_tls_key (docs/adr/0047-mcp-http-limits-tls-origin-body.md).
// The key file must be a regular file owned by the service's account that
// no other account may read or write, as prod-write's other key files
// (pkg/keys): whoever reads it can be the service to every client. Both
// are read at start, where a failure stops the service, and again at the
// first handshake after either file changed (a renewal): a pair that then
// fails the same checks is logged and not served, the one loaded before
// still is.
func mcpTLSConfig(certPath, keyPath string, log *slog.Logger) (*tls.Config, error) {
	c := &mcpCert{certPath: certPath, keyPath: keyPath, log: log}
	ids, err := c.ids()
	if err != nil {
		return nil, err
	}
	if c.cert, err = loadKeyPair(certPath, keyPath); err != nil {
		return nil, err
	}
	c.loaded = ids
	return &tls.Config{GetCertificate: c.get, MinVersion: tls.VersionTLS12}, nil
}

// loadKeyPair reads and checks the certificate chain and key.
func loadKeyPair(certPath, keyPath string) (*tls.Certificate, error) {
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
	return &cert, nil
}

// mcpCert is the certificate MCP over HTTPS serves, loaded again when its
// files change.
type mcpCert struct {
	certPath, keyPath string
	log               *slog.Logger

	mu   sync.Mutex
	cert *tls.Certificate
	// loaded are the files' identities when cert was read; refused the
	// last ones that failed to load, so that a bad pair is logged once,
	// not at every handshake.
	loaded, refused [2]fileID
}

// fileID tells a file's versions apart: a renewal writes a new file (a new
// inode, as certbot's links to a new archive file), or rewrites one (a
// new size or modification time); a chmod or chown, which may make a
// refused key servable, changes its ctime.
type fileID struct {
	dev, ino     uint64
	size         int64
	mtime        time.Time
	ctimeSec     int64
	ctimeNanosec int64
}

func (c *mcpCert) ids() ([2]fileID, error) {
	var ids [2]fileID
	for i, p := range []string{c.certPath, c.keyPath} {
		fi, err := os.Stat(p)
		if err != nil {
			return ids, fmt.Errorf("service.mcp_tls_%s: %w", [2]string{"cert", "key"}[i], err)
		}
		ids[i] = fileID{size: fi.Size(), mtime: fi.ModTime()}
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			ids[i].dev, ids[i].ino = uint64(st.Dev), st.Ino
			ids[i].ctimeSec, ids[i].ctimeNanosec = st.Ctim.Sec, st.Ctim.Nsec
		}
	}
	return ids, nil
}

// get is the tls.Config's GetCertificate: the pair loaded, read again
// first if either file changed since.
func (c *mcpCert) get(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	ids, err := c.ids()
	c.mu.Lock()
	defer c.mu.Unlock()
	if err == nil && ids != c.loaded && ids != c.refused {
		if cert, err := loadKeyPair(c.certPath, c.keyPath); err != nil {
			c.refused = ids
			c.log.Warn("mcp over https: the certificate or key changed but cannot be served: still serving the pair loaded before", "err", err)
		} else {
			c.cert, c.loaded = cert, ids
			c.log.Info("mcp over https: the certificate changed: serving the new one", "cert", c.certPath)
		}
	}
	return c.cert, nil
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
