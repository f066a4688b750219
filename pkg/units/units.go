// Package units holds the value types the configuration files write as
// text: a Duration ("90s", "2m") and a Size ("64KiB", "1MiB"). It links
// nothing of the domain, so a client that reads only prod-write.toml (the
// runner service's fast run client, pkg/fastrun) stays small.
package units

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Duration is a time.Duration written in TOML as a Go duration string
// ("90s", "2m", "1h").
type Duration struct{ time.Duration }

// UnmarshalText implements encoding.TextUnmarshaler.
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(string(b))
	if err != nil {
		return fmt.Errorf("invalid duration %q: want a Go duration such as \"90s\" or \"2m\"", b)
	}
	if v <= 0 {
		return fmt.Errorf("invalid duration %q: must be positive", b)
	}
	d.Duration = v
	return nil
}

// TOMLDescription says what a duration looks like, for messages about a
// value that is not one.
func (Duration) TOMLDescription() string { return `a duration string such as "2m"` }

// MarshalText implements encoding.TextMarshaler.
func (d Duration) MarshalText() ([]byte, error) { return []byte(d.String()), nil }

// Size is a byte count written in TOML as a number with an optional binary
// unit ("512", "64KiB", "1MiB", "2GiB").
type Size int64

var sizeUnits = []struct {
	suffix string
	mult   int64
}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}, {"B", 1}, {"", 1}}

// UnmarshalText implements encoding.TextUnmarshaler.
func (s *Size) UnmarshalText(b []byte) error {
	text := strings.TrimSpace(string(b))
	for _, u := range sizeUnits {
		num, ok := strings.CutSuffix(text, u.suffix)
		if !ok {
			continue
		}
		n, err := strconv.ParseInt(strings.TrimSpace(num), 10, 64)
		if err != nil || n < 0 || n > (1<<62)/u.mult {
			break
		}
		*s = Size(n * u.mult)
		return nil
	}
	return fmt.Errorf("invalid size %q: want a number with an optional unit B, KiB, MiB or GiB", b)
}

// TOMLDescription says what a size looks like, for messages about a value
// that is not one.
func (Size) TOMLDescription() string { return `a size such as "64KiB" or 1024` }

// MarshalText implements encoding.TextMarshaler.
func (s Size) MarshalText() ([]byte, error) { return []byte(strconv.FormatInt(int64(s), 10)), nil }
