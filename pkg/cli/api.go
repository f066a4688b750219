package cli

import (
	"github.com/prod-write/prod-write/pkg/api"
)

// api returns the API this caller reaches (localapi.Env.Reach).
func (f *Factory) api() (api.API, error) { return f.Reach() }
