package dlqcli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Client calls the DLQ routes of the hookline api with a tenant API key.
// Its methods return *APIError when the api answers with an error and
// *UnreachableError when it cannot be reached.
type Client struct {
	base *url.URL
	key  string
	http *http.Client
}

// NewClient returns a client for the api at baseURL (scheme and host, with
// an optional path prefix) authenticating with key. A nil hc means an
// http.Client with a 30 s timeout.
func NewClient(baseURL, key string, hc *http.Client) (*Client, error) {
	u, err := url.Parse(baseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("api url %q: must be an http or https URL with a host", baseURL)
	}
	if key == "" {
		return nil, errors.New("no API key")
	}
	if hc == nil {
		hc = &http.Client{Timeout: 30 * time.Second}
	}
	u.Path, u.RawPath = strings.TrimSuffix(u.Path, "/"), strings.TrimSuffix(u.RawPath, "/")
	u.RawQuery, u.Fragment = "", ""
	return &Client{base: u, key: key, http: hc}, nil
}

// List returns one page of the DLQ, oldest first. limit 0 leaves the api's
// default; cursor is the NextCursor of the previous page.
func (c *Client) List(ctx context.Context, f Filter, limit int, cursor string) (Page, error) {
	q := f.query()
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	if cursor != "" {
		q.Set("cursor", cursor)
	}
	var p Page
	err := c.do(ctx, http.MethodGet, "/v1/dlq", q, nil, &p)
	return p, err
}

// Counts returns the number of DLQ entries matching f, by failure category.
func (c *Client) Counts(ctx context.Context, f Filter) (Counts, error) {
	var n Counts
	err := c.do(ctx, http.MethodGet, "/v1/dlq/counts", f.query(), nil, &n)
	return n, err
}

// Retry retries one exhausted delivery of a webhook as a new delivery and
// returns the new delivery's id. An empty priority leaves the api's default.
func (c *Client) Retry(ctx context.Context, webhookID, deliveryID, priority string) (string, error) {
	body := struct {
		Priority string `json:"priority,omitempty"`
	}{priority}
	var out struct {
		DeliveryID string `json:"delivery_id"`
	}
	path := "/v1/webhooks/" + url.PathEscape(webhookID) + "/deliveries/" + url.PathEscape(deliveryID) + "/retry"
	if err := c.do(ctx, http.MethodPost, path, nil, body, &out); err != nil {
		return "", err
	}
	return out.DeliveryID, nil
}

// StartBatch starts a batch retry and returns its operation id.
func (c *Client) StartBatch(ctx context.Context, req BatchRequest) (string, error) {
	var out struct {
		BatchOperationID string `json:"batch_operation_id"`
	}
	if err := c.do(ctx, http.MethodPost, "/v1/dlq/retry-batch", nil, req, &out); err != nil {
		return "", err
	}
	return out.BatchOperationID, nil
}

// Batch returns the progress of a batch operation.
func (c *Client) Batch(ctx context.Context, id string) (BatchOperation, error) {
	var b BatchOperation
	err := c.do(ctx, http.MethodGet, "/v1/dlq/batch-operations/"+url.PathEscape(id), nil, nil, &b)
	return b, err
}

// Cancel cancels a batch operation and returns it as it is after the
// cancel.
func (c *Client) Cancel(ctx context.Context, id string) (BatchOperation, error) {
	var b BatchOperation
	err := c.do(ctx, http.MethodPost, "/v1/dlq/batch-operations/"+url.PathEscape(id)+"/cancel", nil, nil, &b)
	return b, err
}

// APIError is an error answered by the api.
type APIError struct {
	Status  int
	Code    string
	Message string
}

func (e *APIError) Error() string {
	if e.Code == "" {
		return fmt.Sprintf("%s (HTTP %d)", e.Message, e.Status)
	}
	return fmt.Sprintf("%s (%s, HTTP %d)", e.Message, e.Code, e.Status)
}

// UnreachableError means no answer came from the api at URL.
type UnreachableError struct {
	URL string
	Err error
}

func (e *UnreachableError) Error() string {
	return fmt.Sprintf("cannot reach the api at %s: %v", e.URL, e.Err)
}

func (e *UnreachableError) Unwrap() error { return e.Err }

// do sends a request to path (escaped, below the base URL) with a JSON body
// when in is not nil, and decodes a 2xx JSON answer into out.
func (c *Client) do(ctx context.Context, method, path string, q url.Values, in, out any) error {
	req, err := c.newRequest(ctx, method, path, q, in)
	if err != nil {
		return err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return c.transportError(ctx, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	if err != nil {
		return &UnreachableError{URL: c.base.Redacted(), Err: fmt.Errorf("read answer to %s %s: %w", method, path, err)}
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return decodeAPIError(resp.StatusCode, raw)
	}
	if err := json.Unmarshal(raw, out); err != nil {
		return fmt.Errorf("decode answer to %s %s (HTTP %d): %w", method, path, resp.StatusCode, err)
	}
	return nil
}

// newRequest builds an authenticated request.
func (c *Client) newRequest(ctx context.Context, method, path string, q url.Values, in any) (*http.Request, error) {
	u := *c.base
	u.RawPath = c.base.EscapedPath() + path
	p, err := url.PathUnescape(u.RawPath)
	if err != nil {
		return nil, fmt.Errorf("request path %q: %w", u.RawPath, err)
	}
	u.Path, u.RawQuery = p, q.Encode()
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return nil, fmt.Errorf("encode request: %w", err)
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, u.String(), body)
	if err != nil {
		return nil, fmt.Errorf("build request: %w", err)
	}
	req.Header.Set("Authorization", "Bearer "+c.key)
	req.Header.Set("Accept", "application/json")
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	return req, nil
}

// transportError keeps a cancelled context as it is and makes any other
// failure to get an answer an *UnreachableError naming the api URL.
func (c *Client) transportError(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	var uerr *url.Error
	if errors.As(err, &uerr) {
		err = uerr.Err
	}
	return &UnreachableError{URL: c.base.Redacted(), Err: err}
}

// decodeAPIError reads {"error": {"code", "message"}}; an answer of another
// shape (a proxy's error page) keeps the HTTP status text.
func decodeAPIError(status int, raw []byte) *APIError {
	var body struct {
		Error struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	e := &APIError{Status: status}
	if json.Unmarshal(raw, &body) == nil && body.Error.Message != "" {
		e.Code, e.Message = body.Error.Code, body.Error.Message
		return e
	}
	e.Message = http.StatusText(status)
	if e.Message == "" {
		e.Message = "unexpected answer"
	}
	return e
}
