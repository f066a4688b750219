package testservers

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/zitadel/oidc/v3/example/server/storage"
	"github.com/zitadel/oidc/v3/pkg/oidc"
	"github.com/zitadel/oidc/v3/pkg/op"
)

// AuthServer is a real OAuth 2.0 authorization server for the tests of MCP
// over HTTP as a resource server: zitadel's OpenID provider (the pkg/op
// package of github.com/zitadel/oidc/v3), in process on a loopback port,
// over that module's example in-memory storage. Only the clients are this
// project's: each is a confidential client of the client_credentials grant
// whose access tokens are JWTs for the audience it is configured with, as
// an authorization server is configured with the resources a client may
// reach. Discovery, the JWKS, client authentication, the token endpoint and
// the signing of the tokens are zitadel's.
type AuthServer struct {
	// URL is the issuer: the srv's base URL.
	URL string
	srv *httptest.Server
}

// AuthClient is a client of an AuthServer.
type AuthClient struct {
	ID, Secret string
	// Audience is the aud of every access token issued to the client.
	Audience []string
	// Scopes are the scopes the client may be granted: a request's
	// others are dropped. The granted ones are the token's scope claim.
	Scopes []string
	// Opaque clients are issued opaque access tokens (zitadel's bearer
	// tokens, encrypted ids) instead of JWTs: a resource server learns
	// what one is only from the introspection endpoint (RFC 7662).
	Opaque bool
	// Introspects says the client is a resource server that may ask the
	// introspection endpoint about tokens (authenticated, as zitadel
	// authenticates every client, with its id and secret).
	Introspects bool
}

// StartAuthServer starts an AuthServer with clients; it stops when t ends.
func StartAuthServer(t testing.TB, clients ...AuthClient) *AuthServer {
	t.Helper()
	srv := httptest.NewUnstartedServer(nil)
	srv.Start()
	t.Cleanup(srv.Close)
	issuer := srv.URL
	st := &authStorage{Storage: storage.NewStorage(storage.NewUserStore(issuer)), issuer: issuer, clients: map[string]AuthClient{}, issued: map[string]issuedToken{}}
	for _, c := range clients {
		st.clients[c.ID] = c
	}
	var key [32]byte
	if _, err := rand.Read(key[:]); err != nil {
		t.Fatal(err)
	}
	provider, err := op.NewProvider(&op.Config{
		CryptoKey:      key,
		AuthMethodPost: true,
	}, st, op.StaticIssuer(issuer), op.WithAllowInsecure())
	if err != nil {
		t.Fatalf("starting the authorization server: %v", err)
	}
	// The handler is set before any request can reach it: the URL is
	// known to no one else yet.
	srv.Config.Handler = provider
	return &AuthServer{URL: issuer, srv: srv}
}

// Client returns an HTTP client of the server's loopback listener.
func (a *AuthServer) Client() *http.Client { return a.srv.Client() }

// authStorage is zitadel's example storage with this package's clients of
// the client_credentials grant.
type authStorage struct {
	*storage.Storage
	issuer  string
	clients map[string]AuthClient

	mu sync.Mutex
	// issued is what each access token was issued as, by its id: the
	// example storage keeps its own record privately, and introspects a
	// token only by looking its subject up as a user, which a client of
	// the client_credentials grant is not.
	issued map[string]issuedToken
}

type issuedToken struct {
	subject, client string
	audience        []string
	scopes          []string
	issued, expires time.Time
}

// CreateAccessToken implements op.Storage: the example storage's token,
// recorded for introspection.
func (s *authStorage) CreateAccessToken(ctx context.Context, request op.TokenRequest) (string, time.Time, error) {
	id, exp, err := s.Storage.CreateAccessToken(ctx, request)
	if err != nil {
		return "", time.Time{}, err
	}
	client := request.GetSubject() // a client_credentials token's subject is its client
	s.mu.Lock()
	s.issued[id] = issuedToken{subject: request.GetSubject(), client: client, audience: request.GetAudience(), scopes: request.GetScopes(), issued: time.Now(), expires: exp}
	s.mu.Unlock()
	return id, exp, nil
}

// AuthorizeClientIDSecret implements op.Storage: this package's clients,
// on the token and introspection endpoints alike.
func (s *authStorage) AuthorizeClientIDSecret(ctx context.Context, clientID, clientSecret string) error {
	c, ok := s.clients[clientID]
	if !ok || subtle.ConstantTimeCompare([]byte(c.Secret), []byte(clientSecret)) != 1 {
		return errClient
	}
	return nil
}

// SetIntrospectionFromToken implements op.Storage: zitadel's introspection
// endpoint has authenticated the asking client and decrypted the opaque
// token into its id and subject; this says what the token was issued as,
// to a client that Introspects only. An error is zitadel's
// {"active":false}.
func (s *authStorage) SetIntrospectionFromToken(ctx context.Context, resp *oidc.IntrospectionResponse, tokenID, subject, clientID string) error {
	if !s.clients[clientID].Introspects {
		return errors.New("the client may not introspect")
	}
	s.mu.Lock()
	tok, ok := s.issued[tokenID]
	s.mu.Unlock()
	if !ok || tok.subject != subject {
		return errors.New("no such token")
	}
	if !time.Now().Before(tok.expires) {
		return errors.New("the token expired")
	}
	resp.Subject, resp.ClientID, resp.Issuer, resp.TokenType = tok.subject, tok.client, s.issuer, oidc.BearerToken
	resp.Audience, resp.Scope = tok.audience, tok.scopes
	resp.IssuedAt, resp.NotBefore, resp.Expiration = oidc.FromTime(tok.issued), oidc.FromTime(tok.issued), oidc.FromTime(tok.expires)
	return nil
}

var errClient = errors.New("wrong client id or secret")

// ClientCredentials implements op.ClientCredentialsStorage.
func (s *authStorage) ClientCredentials(ctx context.Context, clientID, clientSecret string) (op.Client, error) {
	c, ok := s.clients[clientID]
	if !ok || subtle.ConstantTimeCompare([]byte(c.Secret), []byte(clientSecret)) != 1 {
		return nil, errClient
	}
	return &serviceClient{Client: storage.WebClient(c.ID, c.Secret), opaque: c.Opaque}, nil
}

// ClientCredentialsTokenRequest implements op.ClientCredentialsStorage: the
// token's subject is the client, its audience the client's.
func (s *authStorage) ClientCredentialsTokenRequest(ctx context.Context, clientID string, scopes []string) (op.TokenRequest, error) {
	c, ok := s.clients[clientID]
	if !ok {
		return nil, errClient
	}
	var granted []string
	for _, sc := range scopes {
		if slices.Contains(c.Scopes, sc) {
			granted = append(granted, sc)
		}
	}
	return &oidc.JWTTokenRequest{Subject: c.ID, Audience: c.Audience, Scopes: granted}, nil
}

// GetPrivateClaimsFromScopes implements op.Storage: zitadel's JWT access
// token carries no scope claim of its own, so the granted scopes are added
// as one (RFC 9068 §2.2.3).
func (s *authStorage) GetPrivateClaimsFromScopes(ctx context.Context, userID, clientID string, scopes []string) (map[string]any, error) {
	claims, err := s.Storage.GetPrivateClaimsFromScopes(ctx, userID, clientID, scopes)
	if err != nil {
		return nil, err
	}
	if _, ok := s.clients[clientID]; ok && len(scopes) > 0 {
		if claims == nil {
			claims = map[string]any{}
		}
		claims["scope"] = strings.Join(scopes, " ")
	}
	return claims, nil
}

// serviceClient is a confidential client of the client_credentials grant
// only, whose access tokens are JWTs, or opaque.
type serviceClient struct {
	*storage.Client
	opaque bool
}

func (c *serviceClient) GrantTypes() []oidc.GrantType {
	return []oidc.GrantType{oidc.GrantTypeClientCredentials}
}

func (c *serviceClient) AccessTokenType() op.AccessTokenType {
	if c.opaque {
		return op.AccessTokenTypeBearer
	}
	return op.AccessTokenTypeJWT
}
