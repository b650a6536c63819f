package event

import (
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/hookline/hookline/internal/filter"
)

// BenchmarkFilterView is what payload filters add to one publish: the
// payload (1 KiB) decoded once and the filters of a tenant's 100 webhooks
// evaluated on it, all matching (same: one expression for all, evaluated
// once; distinct: one expression per webhook).
func BenchmarkFilterView(b *testing.B) {
	data := []byte(`{"seq": 1, "amount": 150, "filler": "` + strings.Repeat("x", 950) + `"}`)
	log := slog.New(slog.DiscardHandler)
	for _, tc := range []struct {
		name string
		expr func(i int) string
	}{
		{"same", func(int) string { return "data.amount > 100" }},
		{"distinct", func(i int) string { return fmt.Sprintf("data.amount > %d", i) }},
	} {
		programs := filter.NewCache(0)
		v := &filterView{}
		for i := range 100 {
			p, err := programs.Program(tc.expr(i))
			if err != nil {
				b.Fatal(err)
			}
			v.hooks = append(v.hooks, filteredHook{id: uuid.New(), events: []string{"bench.*"}, program: p})
		}
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if refused := v.refused("bench.created", "", data, log); len(refused) != 0 {
					b.Fatal(refused)
				}
			}
		})
	}
}
