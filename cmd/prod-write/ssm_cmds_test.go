package main

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"

	"github.com/rogpeppe/go-internal/testscript"
)

// cmdFakeSSM starts a fake of SSM Parameter Store's GetParameter (the
// JSON 1.1 protocol the AWS SDK speaks) holding NAME=VALUE parameters, and
// sets $SSM_ENDPOINT; it records which parameters were asked for:
//
//	fakessm /pw/PW_SECRET=value …
func cmdFakeSSM(ts *testscript.TestScript, neg bool, args []string) {
	if neg {
		ts.Fatalf("usage: fakessm NAME=VALUE…")
	}
	params := map[string]string{}
	for _, kv := range args {
		k, v, _ := strings.Cut(kv, "=")
		params[k] = v
	}
	var mu sync.Mutex
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/x-amz-json-1.1")
		if r.Header.Get("X-Amz-Target") != "AmazonSSM.GetParameter" || !strings.HasPrefix(r.Header.Get("Authorization"), "AWS4-HMAC-SHA256 ") {
			w.WriteHeader(400)
			w.Write([]byte(`{"__type":"InvalidAction","message":"want a signed GetParameter"}`))
			return
		}
		var in struct {
			Name           string
			WithDecryption bool
		}
		json.NewDecoder(r.Body).Decode(&in)
		mu.Lock()
		v, ok := params[in.Name]
		mu.Unlock()
		if !ok || !in.WithDecryption {
			w.WriteHeader(400)
			w.Write([]byte(`{"__type":"ParameterNotFound","message":"not found"}`))
			return
		}
		json.NewEncoder(w).Encode(map[string]any{"Parameter": map[string]any{"Name": in.Name, "Type": "SecureString", "Value": v, "Version": 1}})
	}))
	ts.Defer(srv.Close)
	ts.Setenv("SSM_ENDPOINT", srv.URL)
}
