package doctor

import (
	"fmt"
	"sort"
	"strings"

	"github.com/prod-write/prod-write/operations"
	"github.com/prod-write/prod-write/pkg/config"
)

// Service judges what the runner service c names answered to ops list, as
// its callers would ask it (docs/adr/0045-bridges-and-doctor-as-api-clients.md):
// served is each operation it serves by name, with its digest, and err why
// it did not answer. A service that does not answer is a note: nothing
// runs while it is down, and doctor is also run before it is first
// started. One that serves another registry than reg, the one on disk (it
// was not reloaded since the registry changed, or it reads another
// directory), is a warning: what is enforced is not what was reviewed.
func Service(c *config.Config, served map[string]string, err error, reg *operations.Registry) []Finding {
	if err != nil {
		return []Finding{{Severity: Info, Check: "service-unreachable", Path: c.Service.Socket,
			Message: fmt.Sprintf("the runner service does not answer ops list: %v", err),
			Fix:     "start it (systemctl start prod-write.socket, or prod-write serve as its account; docs/DEPLOYMENT.md), and check its log"}}
	}
	if reg == nil {
		return nil // the registry's own finding says why (registry-invalid)
	}
	left := make(map[string]string, len(served))
	for name, d := range served {
		left[name] = d
	}
	var differ []string
	for _, op := range reg.All() {
		if d, ok := left[op.Name]; !ok || d != op.Digest {
			differ = append(differ, op.Name)
		}
		delete(left, op.Name)
	}
	for name := range left {
		differ = append(differ, name)
	}
	if len(differ) == 0 {
		return nil
	}
	sort.Strings(differ)
	return []Finding{{Severity: Warning, Check: "service-registry-differs", Path: c.Registry,
		Message: fmt.Sprintf("the runner service serves operations that differ from %s: %s", c.Registry, strings.Join(differ, ", ")),
		Fix:     "reload the service so that it reads the registry again (systemctl reload prod-write, or SIGHUP to prod-write serve), or point both at one registry"}}
}
