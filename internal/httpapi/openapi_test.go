package httpapi

import (
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
