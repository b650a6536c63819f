package webhook

import (
	"errors"
	"strings"

	"github.com/hookline/hookline/internal/fielderr"
	"github.com/hookline/hookline/internal/filter"
)

// checkFilter validates a payload filter (see package filter) and returns
// it without surrounding spaces; empty or blank means no filter. A refused
// expression is a field error whose message gives the line and column of
// the problem in the text as sent.
func checkFilter(expr string) (string, error) {
	if strings.TrimSpace(expr) == "" {
		return "", nil
	}
	if err := fielderr.Text("filter", expr); err != nil {
		return "", err
	}
	if _, err := filter.Compile(expr); err != nil {
		var fe *filter.Error
		if errors.As(err, &fe) {
			return "", fielderr.New("filter", "%s", fe.Error())
		}
		return "", err
	}
	return strings.TrimSpace(expr), nil
}
