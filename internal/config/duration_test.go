package config_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gopkg.in/yaml.v3"

	"github.com/hookline/hookline/internal/config"
)

func TestDurationUnmarshalYAML(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name    string
		yaml    string
		want    time.Duration
		wantErr string
	}{
		{name: "seconds", yaml: `d: 25s`, want: 25 * time.Second},
		{name: "quoted", yaml: `d: "1m30s"`, want: 90 * time.Second},
		{name: "hours", yaml: `d: 24h`, want: 24 * time.Hour},
		{name: "milliseconds", yaml: `d: 250ms`, want: 250 * time.Millisecond},
		{name: "zero", yaml: `d: 0s`, want: 0},
		{name: "bare zero", yaml: `d: 0`, want: 0},
		{name: "negative parses", yaml: `d: -5s`, want: -5 * time.Second},
		{name: "null keeps the old value", yaml: `d: ~`, want: 42},
		{name: "number without unit", yaml: `d: 30`, wantErr: `line 1: "30" is not a duration`},
		{name: "word", yaml: "\nd: later", wantErr: `line 2: "later" is not a duration`},
		{name: "empty string", yaml: `d: ""`, wantErr: `"" is not a duration`},
		{name: "list", yaml: `d: [1s]`, wantErr: "duration must be a string"},
		{name: "map", yaml: `d: {s: 1}`, wantErr: "duration must be a string"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			v := struct {
				D config.Duration `yaml:"d"`
			}{D: 42}
			err := yaml.Unmarshal([]byte(tt.yaml), &v)
			if tt.wantErr != "" {
				require.ErrorContains(t, err, tt.wantErr)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.want, v.D.D())
		})
	}
}
