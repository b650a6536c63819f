package tenant

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hookline/hookline/internal/config"
	"github.com/hookline/hookline/internal/fielderr"
)

// A name Postgres cannot store is refused as a field, on create and on
// rename, instead of failing the insert.
func TestBuildRefusesUnstorableName(t *testing.T) {
	t.Parallel()
	base := WithDefaults(config.Default().Defaults)
	for _, name := range []string{"a\x00b", "caf\xe9", "\xed\xa0\x80"} {
		for _, creating := range []bool{true, false} {
			_, err := Build(base, Input{Name: ptr(name)}, creating)
			var fe *fielderr.Error
			require.ErrorAs(t, err, &fe, "%q", name)
			require.Equal(t, "name", fe.Field)
		}
	}
	_, err := Build(base, Input{Name: ptr("café")}, true)
	require.NoError(t, err)
}
