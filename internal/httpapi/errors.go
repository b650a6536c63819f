package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"reflect"
	"sort"
	"strings"

	"github.com/gin-gonic/gin"

	"github.com/hookline/hookline/internal/fielderr"
)

// apiError is what clients receive: {"error": {"code", "message", "field"}}.
type apiError struct {
	Status  int    `json:"-"`
	Code    string `json:"code"`
	Message string `json:"message"`
	Field   string `json:"field,omitempty"`
}

func (e *apiError) Error() string { return e.Code + ": " + e.Message }

func newError(status int, code, format string, args ...any) *apiError {
	return &apiError{Status: status, Code: code, Message: fmt.Sprintf(format, args...)}
}

var (
	errUnauthorized = newError(http.StatusUnauthorized, "unauthorized", "missing or invalid API key: send Authorization: Bearer <key>")
	errNotFound     = newError(http.StatusNotFound, "not_found", "no such resource")
)

// abort answers err as JSON. Errors that are not ours to explain (database
// failures and the like) are logged and answered as a plain 500: clients
// never see SQL or driver messages.
func abort(c *gin.Context, err error) {
	ae := clientError(err)
	if ae == nil {
		logger(c).ErrorContext(c.Request.Context(), "request failed", "method", c.Request.Method, "route", c.FullPath(), "error", err)
		ae = errInternal
	}
	c.AbortWithStatusJSON(ae.Status, gin.H{"error": ae})
}

var errInternal = newError(http.StatusInternalServerError, "internal_error", "an internal error occurred; it has been logged")

// clientError is the answer err gives the client, nil when err is not
// the client's to know (ours: logged, answered internal_error).
func clientError(err error) *apiError {
	var ae *apiError
	var fe *fielderr.Error
	switch {
	case errors.As(err, &ae):
		return ae
	case errors.As(err, &fe):
		return &apiError{Status: http.StatusBadRequest, Code: "invalid_request", Message: fe.Error(), Field: fe.Field}
	}
	return nil
}

// PublishProblem is what POST /v1/events answers for err, an error of
// authentication, ParsePublish or event.Service.Publish: its status, code
// and message, and ok false when err is not the producer's but ours (the
// route's 500 internal_error), which the caller logs and may try again.
func PublishProblem(err error) (status int, code, message string, ok bool) {
	ae := clientError(mapEventErr(err))
	if ae == nil {
		return errInternal.Status, errInternal.Code, errInternal.Message, false
	}
	return ae.Status, ae.Code, ae.Message, true
}

func logger(c *gin.Context) *slog.Logger {
	if l, ok := c.Get(loggerKey); ok {
		return l.(*slog.Logger)
	}
	return slog.Default()
}

// decodeJSON reads a JSON object body strictly into dst: unknown fields
// (named with their full path), wrong types, trailing data, text Postgres
// cannot store (see fielderr.JSONText; Go's decoder would pass it, or
// silently turn it into U+FFFD) and bodies over limit bytes are refused
// with a 400 (413 for size) naming what is wrong.
func decodeJSON(c *gin.Context, limit int64, dst any) error {
	raw, err := io.ReadAll(http.MaxBytesReader(c.Writer, c.Request.Body, limit))
	if err != nil {
		return jsonError(err)
	}
	var generic any
	dec := json.NewDecoder(bytes.NewReader(raw))
	if err := dec.Decode(&generic); err != nil {
		return jsonError(err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return newError(http.StatusBadRequest, "invalid_json", "request body must hold a single JSON object")
	}
	obj, ok := generic.(map[string]any)
	if !ok {
		return newError(http.StatusBadRequest, "invalid_json", "request body must be a JSON object")
	}
	if field := unknownField(obj, reflect.TypeOf(dst), ""); field != "" {
		return &apiError{Status: http.StatusBadRequest, Code: "invalid_request", Field: field,
			Message: field + ": unknown field"}
	}
	if err := fielderr.JSONText("", raw); err != nil {
		return err
	}
	if err := json.Unmarshal(raw, dst); err != nil {
		return jsonError(err)
	}
	return nil
}

// unknownField returns the path of the first key of obj that type t (a
// struct, or a pointer to one) has no JSON field for, descending into
// nested structs. Keys are visited in sorted order so the answer is stable.
func unknownField(obj map[string]any, t reflect.Type, prefix string) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct {
		return ""
	}
	fields := jsonFields(t)
	keys := make([]string, 0, len(obj))
	for k := range obj {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		ft, ok := fields[k]
		if !ok {
			return prefix + k
		}
		if nested, isObj := obj[k].(map[string]any); isObj {
			if f := unknownField(nested, ft, prefix+k+"."); f != "" {
				return f
			}
		}
	}
	return ""
}

// jsonFields maps the JSON names of t's fields (embedded structs included)
// to their types.
func jsonFields(t reflect.Type) map[string]reflect.Type {
	out := map[string]reflect.Type{}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" || !f.IsExported() {
			continue
		}
		if f.Anonymous && name == "" {
			for k, v := range jsonFields(f.Type) {
				out[k] = v
			}
			continue
		}
		if name == "" {
			name = f.Name
		}
		out[name] = f.Type
	}
	return out
}

func jsonError(err error) error {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	var tooBig *http.MaxBytesError
	switch {
	case errors.As(err, &tooBig):
		return newError(http.StatusRequestEntityTooLarge, "payload_too_large", "request body exceeds %d bytes", tooBig.Limit)
	case errors.Is(err, io.EOF):
		return newError(http.StatusBadRequest, "invalid_json", "request body is empty; a JSON object is required")
	case errors.As(err, &syn), errors.Is(err, io.ErrUnexpectedEOF):
		return newError(http.StatusBadRequest, "invalid_json", "request body is not valid JSON")
	case errors.As(err, &typ):
		field := typ.Field
		if field == "" {
			return newError(http.StatusBadRequest, "invalid_json", "request body must be a JSON object")
		}
		return &apiError{Status: http.StatusBadRequest, Code: "invalid_request", Field: field,
			Message: fmt.Sprintf("%s: must be of type %s", field, jsonType(typ.Type.String()))}
	default:
		return newError(http.StatusBadRequest, "invalid_json", "request body is not valid JSON")
	}
}

func jsonType(goType string) string {
	switch {
	case strings.Contains(goType, "map["), strings.Contains(goType, "struct"), strings.HasPrefix(goType, "*httpapi."), strings.Contains(goType, "Input"):
		return "object"
	case strings.HasPrefix(goType, "[]") || strings.HasPrefix(goType, "*[]"):
		return "array"
	case strings.Contains(goType, "int"):
		return "integer"
	case strings.Contains(goType, "float"):
		return "number"
	case strings.Contains(goType, "bool"):
		return "boolean"
	case strings.Contains(goType, "string"):
		return "string"
	}
	return goType
}
