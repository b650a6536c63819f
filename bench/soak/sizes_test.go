package main

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestSizeRows(t *testing.T) {
	const kB = 1024
	snaps := []sizeSnapshot{
		{at: 0, delivered: 0, tables: map[string]tableSize{
			"events":  {total: 16 * kB, heap: 0, indexes: 16 * kB},
			"tenants": {total: 48 * kB, heap: 8 * kB, indexes: 32 * kB, live: 1},
		}},
		{at: time.Minute, delivered: 1000, tables: map[string]tableSize{
			"events":  {total: 1016 * kB, heap: 800 * kB, indexes: 200 * kB, live: 1000},
			"tenants": {total: 48 * kB, heap: 8 * kB, indexes: 32 * kB, live: 1},
		}},
		// Twice the deliveries of the first window, four times the growth.
		{at: 2 * time.Minute, delivered: 3000, tables: map[string]tableSize{
			"events":  {total: 5016 * kB, heap: 4000 * kB, indexes: 1000 * kB, live: 3000, dead: 2000},
			"tenants": {total: 48 * kB, heap: 8 * kB, indexes: 32 * kB, live: 1},
		}},
	}
	rows, unchanged := sizeRows(snaps)
	require.Equal(t, []string{"tenants"}, unchanged)
	require.Equal(t, [][]string{
		{"events", "0m", "0", "16 kB", "0 kB", "16 kB", "0", "0", "-", "-"},
		{"events", "1m", "1000", "1016 kB", "800 kB", "200 kB", "1000", "0", "1024", "1024"},
		{"events", "2m", "3000", "4.9 MB", "3.9 MB", "1000 kB", "3000", "2000", "1707", "2048"},
		{"all tables", "0m", "0", "64 kB", "8 kB", "48 kB", "1", "0", "-", "-"},
		{"all tables", "1m", "1000", "1.0 MB", "808 kB", "232 kB", "1001", "0", "1024", "1024"},
		{"all tables", "2m", "3000", "4.9 MB", "3.9 MB", "1.0 MB", "3001", "2000", "1707", "2048"},
	}, rows)
}
