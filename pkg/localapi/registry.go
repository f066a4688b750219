package localapi

import (
	"github.com/prod-write/prod-write/operations"
)

func LoadRegistry(f *Env) (*operations.Registry, error) {
	c, err := f.Config()
	if err != nil {
		return nil, err
	}
	return f.Registry(c)
}
