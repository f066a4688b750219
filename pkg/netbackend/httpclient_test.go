package netbackend

import (
	"net/http"
	"testing"
)

// The bridges' HTTP client takes no proxy from anyone's environment: a
// caller's HTTPS_PROXY once routed the real GitHub and Slack tokens through
// a proxy of the caller's.
func TestBridgeClientTakesNoProxy(t *testing.T) {
	t.Setenv("HTTPS_PROXY", "http://127.0.0.1:9")
	t.Setenv("HTTP_PROXY", "http://127.0.0.1:9")
	tr, ok := httpClient().Transport.(*http.Transport)
	if !ok {
		t.Fatalf("transport %T, want *http.Transport", httpClient().Transport)
	}
	if tr.Proxy != nil {
		t.Fatal("the bridges' client has a Proxy function: it would read HTTPS_PROXY")
	}
}
