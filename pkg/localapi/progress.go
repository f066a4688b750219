package localapi

import (
	"fmt"
	"io"
)

func ProgressPrinter(w io.Writer) func(string, int64, int64) {
	return func(name string, done, total int64) {
		pct := int64(100)
		if total > 0 {
			pct = done * 100 / total
		}
		fmt.Fprintf(w, "\rhashing %s: %d/%d MiB (%d%%)", name, done>>20, total>>20, pct)
		if done >= total {
			fmt.Fprintln(w)
		}
	}
}
