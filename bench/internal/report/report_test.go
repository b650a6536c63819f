package report

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestEmitWritesNoFileUnlessAskedTo(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	table := Table{Title: "Ceilings", Command: "go run ./bench/ceilings", Header: []string{"part", "per s"}, Rows: [][]string{{"rabbitmq", "10410"}}}

	require.NoError(t, Emit(table, ""))
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Empty(t, entries, "no -record: nothing written, docs/BENCHMARKS.md included")

	record := filepath.Join(dir, "runs.md")
	require.NoError(t, Emit(table, record))
	require.NoError(t, Emit(table, record))
	raw, err := os.ReadFile(record)
	require.NoError(t, err)
	require.Equal(t, 2, strings.Count(string(raw), "## Ceilings ("), "each run appended to the file named")
	require.Contains(t, string(raw), "| rabbitmq | 10410 |")
}
