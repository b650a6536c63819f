package httpapi

import (
	"bytes"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ogen-go/ogen"
	"github.com/ogen-go/ogen/gen"
	"github.com/ogen-go/ogen/gen/genfs"
	"github.com/stretchr/testify/require"
)

// The served document is usable as written: ogen, a generator that reads
// OpenAPI 3.1 itself (no down-conversion to 3.0), turns it into a Go client
// with a method for every operation; the client compiles in a module of its
// own, and testdata/genclient drives a real server through it (admin and
// tenant credentials, request bodies with free-form objects, answers decoded
// and validated against the document's schemas, an error answer).
func TestOpenAPIGeneratedClient(t *testing.T) {
	t.Parallel()
	e := newAPI(t)
	r := e.do("GET", "/openapi.json", "", nil)
	require.Equal(t, http.StatusOK, r.Status)

	// Generate the client part only: no server stubs, no OpenTelemetry.
	// Generation fails on any part of the document ogen cannot express
	// (its "not implemented" errors), rather than leaving it out.
	spec, err := ogen.Parse(r.Raw)
	require.NoError(t, err)
	g, err := gen.NewGenerator(spec, gen.Options{Generator: gen.GenerateOptions{
		Features: &gen.FeatureOptions{
			DisableAll: true,
			Enable:     gen.FeatureSet{gen.PathsClient.Name: {}, gen.ClientRequestValidation.Name: {}},
		},
	}})
	require.NoError(t, err, "ogen cannot build a client from /openapi.json")

	mod := t.TempDir()
	pkg := filepath.Join(mod, "hookclient")
	require.NoError(t, os.Mkdir(pkg, 0o750))
	require.NoError(t, g.WriteSource(genfs.FormattedSource{Root: pkg}, "hookclient"))

	client, err := os.ReadFile(filepath.Join(pkg, "oas_client_gen.go"))
	require.NoError(t, err)
	var doc struct {
		Paths map[string]map[string]struct {
			OperationID string `json:"operationId"`
		} `json:"paths"`
	}
	require.NoError(t, json.Unmarshal(r.Raw, &doc))
	for path, methods := range doc.Paths {
		for method, op := range methods {
			name := strings.ToUpper(op.OperationID[:1]) + op.OperationID[1:]
			require.Contains(t, string(client), "func (c *Client) "+name+"(ctx ",
				"the generated client has no method for %s %s", method, path)
		}
	}

	// The module has hookline's requirements, so that the generated code
	// builds against the versions pinned in go.mod and go.sum (ogen's
	// runtime packages among them) without looking anything up.
	gomod := strings.TrimSpace(goCmd(t, ".", "env", "GOMOD"))
	for _, f := range []string{"go.mod", "go.sum"} {
		b, err := os.ReadFile(filepath.Join(filepath.Dir(gomod), f))
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(mod, f), b, 0o600))
	}
	goCmd(t, mod, "mod", "edit", "-module", "hookline.test/genclient")
	prog, err := os.ReadFile("testdata/genclient/main.go")
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(mod, "main.go"), prog, 0o600))
	bin := filepath.Join(mod, "genclient")
	goCmd(t, mod, "build", "-o", bin, ".")

	cmd := exec.CommandContext(t.Context(), bin, e.http.URL, testAdminToken)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "the generated client against the api: %s", stderr.String())
	var got struct {
		TenantKey         string                     `json:"tenant_key"`
		WebhookID         string                     `json:"webhook_id"`
		WebhookMetadata   map[string]json.RawMessage `json:"webhook_metadata"`
		Listed            []string                   `json:"listed"`
		EventID           string                     `json:"event_id"`
		EventType         string                     `json:"event_type"`
		EventData         map[string]json.RawMessage `json:"event_data"`
		NotFoundCode      string                     `json:"not_found_code"`
		ServiceEventID    string                     `json:"service_event_id"`
		ServiceDeliveries int                        `json:"service_deliveries"`
	}
	require.NoError(t, json.Unmarshal(out, &got), string(out))

	// What the client read back is what the server stored, which is what
	// the client sent.
	require.Equal(t, map[string]json.RawMessage{"team": json.RawMessage(`"payments"`)}, got.WebhookMetadata)
	require.Equal(t, []string{got.WebhookID}, got.Listed)
	require.Equal(t, "order.created", got.EventType)
	require.Equal(t, map[string]json.RawMessage{"order_id": json.RawMessage(`42`)}, got.EventData)
	require.Equal(t, "not_found", got.NotFoundCode)

	wh := e.do("GET", "/v1/webhooks/"+got.WebhookID, got.TenantKey, nil)
	require.Equal(t, http.StatusOK, wh.Status, string(wh.Raw))
	require.Equal(t, map[string]any{"team": "payments"}, wh.Body["metadata"])
	ev := e.do("GET", "/v1/events/"+got.EventID, got.TenantKey, nil)
	require.Equal(t, http.StatusOK, ev.Status, string(ev.Raw))
	require.Equal(t, map[string]any{"order_id": float64(42)}, ev.Body["data"])
	require.Equal(t, 1, got.ServiceDeliveries, "the service key's event reached the tenant's webhook")
	sev := e.do("GET", "/v1/events/"+got.ServiceEventID, got.TenantKey, nil)
	require.Equal(t, http.StatusOK, sev.Status, string(sev.Raw))
	require.Equal(t, map[string]any{"order_id": float64(43)}, sev.Body["data"])
}

// goCmd runs the go command in dir and returns its standard output; the test
// fails with its output if it fails. It runs outside any workspace, leaves
// go.mod as it is and downloads nothing: every module it needs is one that
// building hookline's tests has already brought into the module cache.
func goCmd(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), "go", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=readonly -buildvcs=false", "GOPROXY=off")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "go %s: %s", strings.Join(args, " "), stderr.String())
	return string(out)
}
