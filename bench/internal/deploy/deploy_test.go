package deploy

import (
	"slices"
	"testing"
)

func TestProcessNames(t *testing.T) {
	for _, c := range []struct {
		apis, workers int
		want          []string
	}{
		{0, 0, []string{"api", "worker", "dlq"}},
		{1, 1, []string{"api", "worker", "dlq"}},
		{2, 3, []string{"api", "api-2", "worker", "worker-2", "worker-3", "dlq"}},
	} {
		if got := processNames(c.apis, c.workers); !slices.Equal(got, c.want) {
			t.Errorf("processNames(%d, %d) = %v, want %v", c.apis, c.workers, got, c.want)
		}
	}
}
