package httpapi

import (
	"encoding/json"
	"testing"

	"github.com/pb33f/libopenapi"
	validator "github.com/pb33f/libopenapi-validator"
	"github.com/stretchr/testify/require"
)

// The served document is valid OpenAPI 3.1: checked against the
// specification's own schema by an independent validator, so that client
// generators and 3.1 tools read it as written.
func TestOpenAPIDocumentIsValid31(t *testing.T) {
	t.Parallel()
	doc, err := libopenapi.NewDocument(openAPIDoc)
	require.NoError(t, err)
	v, errs := validator.NewValidator(doc)
	require.Empty(t, errs)
	ok, invalid := v.ValidateDocument()
	for _, e := range invalid {
		for _, f := range e.SchemaValidationErrors {
			t.Errorf("%s: %s", e.Message, f.Reason)
		}
	}
	require.True(t, ok, "%d validation errors", len(invalid))
}

// Every operation can be read in the rendered reference: it has a tag that
// the document declares and describes, a summary (its title), a
// description, and at least one example of its request or of an answer.
func TestOpenAPIOperationsAreDocumented(t *testing.T) {
	t.Parallel()
	type media struct {
		Example  any            `json:"example"`
		Examples map[string]any `json:"examples"`
	}
	var doc struct {
		Tags []struct {
			Name, Description string
		} `json:"tags"`
		Paths map[string]map[string]struct {
			Tags        []string `json:"tags"`
			Summary     string   `json:"summary"`
			Description string   `json:"description"`
			RequestBody struct {
				Content map[string]media `json:"content"`
			} `json:"requestBody"`
			Responses map[string]struct {
				Content map[string]media `json:"content"`
			} `json:"responses"`
		} `json:"paths"`
	}
	require.NoError(t, json.Unmarshal(openAPIDoc, &doc))
	declared := map[string]bool{}
	for _, tag := range doc.Tags {
		require.NotEmpty(t, tag.Description, "tag %s has no description", tag.Name)
		declared[tag.Name] = true
	}
	operations := 0
	for path, methods := range doc.Paths {
		for method, op := range methods {
			where := method + " " + path
			operations++
			require.NotEmpty(t, op.Tags, "%s has no tag", where)
			for _, tag := range op.Tags {
				require.True(t, declared[tag], "%s has tag %q, which the document does not declare", where, tag)
			}
			require.NotEmpty(t, op.Summary, "%s has no summary", where)
			require.NotEmpty(t, op.Description, "%s has no description", where)
			examples := 0
			count := func(content map[string]media) {
				for _, m := range content {
					if m.Example != nil {
						examples++
					}
					examples += len(m.Examples)
				}
			}
			count(op.RequestBody.Content)
			for _, r := range op.Responses {
				count(r.Content)
			}
			require.Positive(t, examples, "%s has no example", where)
		}
	}
	require.Positive(t, operations)
}
