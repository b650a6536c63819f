package filter

import (
	"strings"
	"testing"
)

// payload is a 1 KiB order, the size the publish benchmarks use.
var payload = []byte(`{"amount": 150, "currency": "EUR", "tags": ["vip", "new"], "customer": {"id": "c1", "tier": "gold"},
	"items": [{"sku": "a", "price": 20}, {"sku": "b", "price": 120}], "note": "` + strings.Repeat("x", 800) + `"}`)

// BenchmarkMatch is the cost of evaluating a compiled filter on one
// event whose payload is decoded already (fan-out decodes it once for
// all of a tenant's filters).
func BenchmarkMatch(b *testing.B) {
	data, err := DecodeData(payload)
	if err != nil {
		b.Fatal(err)
	}
	ev := &Event{EventType: "order.created", Source: "checkout", Data: data}
	for _, expr := range []string{
		`data.amount > 100`,
		`data.amount > 100 && data.currency == "EUR"`,
		`event_type.startsWith("order.") && has(data.customer) && data.customer.tier == "gold"`,
		`"vip" in data.tags`,
		`data.items.exists(i, i.price > 100)`,
	} {
		p, err := Compile(expr)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(expr, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if ok, err := p.Match(ev); !ok || err != nil {
					b.Fatal(ok, err)
				}
			}
		})
	}
}

// BenchmarkDecodeData is the cost, once per event, of decoding the
// payload for the filters.
func BenchmarkDecodeData(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if _, err := DecodeData(payload); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkCompile is the cost, once per expression and process, of
// compiling a filter.
func BenchmarkCompile(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Compile(`data.amount > 100 && data.currency == "EUR"`); err != nil {
			b.Fatal(err)
		}
	}
}
