package runner

import (
	"github.com/prod-write/prod-write/operations"
	"github.com/prod-write/prod-write/pkg/config"
)

// LoadRegistry loads c's registry on this host: named by c's host when set,
// so that an operation unavailable here says which host of the fleet.
func LoadRegistry(c *config.Config) (*operations.Registry, error) {
	if c.Host != "" {
		return operations.LoadOn(c.Registry, c.SecurePath, c.Host)
	}
	return operations.Load(c.Registry, c.SecurePath)
}
