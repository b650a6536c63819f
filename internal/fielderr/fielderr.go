// Package fielderr is the refusal of one input field. Domain packages return
// it from validation; the API answers it with 400 and the field's name.
package fielderr

import "fmt"

// Error names a field and what is wrong with it.
type Error struct {
	Field   string
	Message string
}

func (e *Error) Error() string { return e.Field + ": " + e.Message }

// New returns an *Error for field with a formatted message.
func New(field, format string, args ...any) *Error {
	return &Error{Field: field, Message: fmt.Sprintf(format, args...)}
}

// InRange returns an *Error when v is outside [lo, hi], nil otherwise.
func InRange[T int | int64 | float64](field string, v, lo, hi T) *Error {
	if v < lo || v > hi {
		return New(field, "must be between %v and %v, got %v", lo, hi, v)
	}
	return nil
}

// First returns the first non-nil error as an error, or nil.
func First(errs ...*Error) error {
	for _, e := range errs {
		if e != nil {
			return e
		}
	}
	return nil
}
