// Command genclient drives the API through the client that
// TestOpenAPIGeneratedClient generates from /openapi.json into the package
// hookclient beside it, and prints what it read back as JSON. It is built in
// the test's own temporary module, never in this one (testdata is not a
// package of hookline).
//
// Usage: genclient BASE_URL ADMIN_TOKEN
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"

	"github.com/go-faster/jx"
	"github.com/google/uuid"

	"hookline.test/genclient/hookclient"
)

// credentials answers the security schemes of the document: the admin
// token, and the tenant key once the tenant is created (or a service key
// acting for a tenant, which tenant routes take in its place).
type credentials struct{ admin, tenant string }

func (c *credentials) ServiceToken(context.Context, hookclient.OperationName) (hookclient.ServiceToken, error) {
	return hookclient.ServiceToken{Token: c.tenant}, nil
}

func (c *credentials) AdminToken(context.Context, hookclient.OperationName) (hookclient.AdminToken, error) {
	return hookclient.AdminToken{Token: c.admin}, nil
}

func (c *credentials) TenantKey(context.Context, hookclient.OperationName) (hookclient.TenantKey, error) {
	return hookclient.TenantKey{Token: c.tenant}, nil
}

// report is what the client read back; the test compares it with what the
// server stored.
type report struct {
	TenantKey       string                     `json:"tenant_key"`
	WebhookID       string                     `json:"webhook_id"`
	WebhookMetadata map[string]json.RawMessage `json:"webhook_metadata"`
	Listed          []string                   `json:"listed"`
	EventID         string                     `json:"event_id"`
	EventType       string                     `json:"event_type"`
	EventData       map[string]json.RawMessage `json:"event_data"`
	NotFoundCode    string                     `json:"not_found_code"`
	// ServiceEventID is an event published by a service key acting for
	// the tenant.
	ServiceEventID    string `json:"service_event_id"`
	ServiceDeliveries int    `json:"service_deliveries"`
}

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: genclient BASE_URL ADMIN_TOKEN")
		os.Exit(2)
	}
	out, err := run(context.Background(), os.Args[1], os.Args[2])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if err := json.NewEncoder(os.Stdout).Encode(out); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func run(ctx context.Context, baseURL, adminToken string) (*report, error) {
	creds := &credentials{admin: adminToken}
	c, err := hookclient.NewClient(baseURL, creds)
	if err != nil {
		return nil, err
	}
	var out report

	tres, err := c.CreateTenant(ctx, &hookclient.TenantInput{Name: hookclient.NewOptString("generated-client")})
	if err != nil {
		return nil, fmt.Errorf("createTenant: %w", err)
	}
	tenant, ok := tres.(*hookclient.TenantCreated)
	if !ok {
		return nil, fmt.Errorf("createTenant answered %T %+v", tres, tres)
	}
	creds.tenant = tenant.APIKey.Value
	out.TenantKey = creds.tenant

	wres, err := c.CreateWebhook(ctx, &hookclient.WebhookInput{
		URL:      hookclient.NewOptString("https://8.8.8.8/hooks"),
		Events:   []string{"order.*"},
		Metadata: hookclient.NewOptWebhookInputMetadata(hookclient.WebhookInputMetadata{"team": jx.Raw(`"payments"`)}),
	}, hookclient.CreateWebhookParams{})
	if err != nil {
		return nil, fmt.Errorf("createWebhook: %w", err)
	}
	created, ok := wres.(*hookclient.WebhookWithSecret)
	if !ok {
		return nil, fmt.Errorf("createWebhook answered %T %+v", wres, wres)
	}
	out.WebhookID = created.ID.Value.String()

	gres, err := c.GetWebhook(ctx, hookclient.GetWebhookParams{ID: created.ID.Value})
	if err != nil {
		return nil, fmt.Errorf("getWebhook: %w", err)
	}
	wh, ok := gres.(*hookclient.Webhook)
	if !ok {
		return nil, fmt.Errorf("getWebhook answered %T %+v", gres, gres)
	}
	out.WebhookMetadata = raw(wh.Metadata.Value)

	lres, err := c.ListWebhooks(ctx, hookclient.ListWebhooksParams{})
	if err != nil {
		return nil, fmt.Errorf("listWebhooks: %w", err)
	}
	list, ok := lres.(*hookclient.WebhookList)
	if !ok {
		return nil, fmt.Errorf("listWebhooks answered %T %+v", lres, lres)
	}
	for _, w := range list.Data {
		out.Listed = append(out.Listed, w.ID.Value.String())
	}

	pres, err := c.PublishEvent(ctx, &hookclient.PublishInput{
		EventType: "order.created",
		Data:      hookclient.PublishInputData{"order_id": jx.Raw(`42`)},
	}, hookclient.PublishEventParams{})
	if err != nil {
		return nil, fmt.Errorf("publishEvent: %w", err)
	}
	published, ok := pres.(*hookclient.PublishResult)
	if !ok {
		return nil, fmt.Errorf("publishEvent answered %T %+v", pres, pres)
	}

	eres, err := c.GetEvent(ctx, hookclient.GetEventParams{ID: published.ID.Value})
	if err != nil {
		return nil, fmt.Errorf("getEvent: %w", err)
	}
	ev, ok := eres.(*hookclient.Event)
	if !ok {
		return nil, fmt.Errorf("getEvent answered %T %+v", eres, eres)
	}
	out.EventID = ev.ID.Value.String()
	out.EventType = ev.EventType.Value
	out.EventData = raw(ev.Data.Value)

	// An error answer decodes into the document's Error schema.
	nres, err := c.GetWebhook(ctx, hookclient.GetWebhookParams{ID: uuid.Must(uuid.NewV7())})
	if err != nil {
		return nil, fmt.Errorf("getWebhook of an unknown id: %w", err)
	}
	nf, ok := nres.(*hookclient.GetWebhookNotFound)
	if !ok {
		return nil, fmt.Errorf("getWebhook of an unknown id answered %T %+v", nres, nres)
	}
	out.NotFoundCode = nf.Error.Code

	// A service key of the tenant's set publishes for it, naming it in the
	// Hookline-Tenant header.
	sres, err := c.CreateServiceKey(ctx, &hookclient.ServiceKeyInput{
		Scopes:    []hookclient.ServiceKeyInputScopesItem{hookclient.ServiceKeyInputScopesItemPublish},
		TenantIds: hookclient.NewOptNilUUIDArray([]uuid.UUID{tenant.ID.Value}),
	})
	if err != nil {
		return nil, fmt.Errorf("createServiceKey: %w", err)
	}
	sk, ok := sres.(*hookclient.ServiceKeyCreated)
	if !ok {
		return nil, fmt.Errorf("createServiceKey answered %T %+v", sres, sres)
	}
	creds.tenant = sk.ServiceKey.Value
	spres, err := c.PublishEvent(ctx, &hookclient.PublishInput{
		EventType: "order.created",
		Data:      hookclient.PublishInputData{"order_id": jx.Raw(`43`)},
	}, hookclient.PublishEventParams{HooklineTenant: hookclient.NewOptUUID(tenant.ID.Value)})
	if err != nil {
		return nil, fmt.Errorf("publishEvent with a service key: %w", err)
	}
	spub, ok := spres.(*hookclient.PublishResult)
	if !ok {
		return nil, fmt.Errorf("publishEvent with a service key answered %T %+v", spres, spres)
	}
	out.ServiceEventID, out.ServiceDeliveries = spub.ID.Value.String(), spub.Deliveries.Value
	return &out, nil
}

// raw turns a free-form object of the generated client into plain JSON.
func raw[M ~map[string]jx.Raw](m M) map[string]json.RawMessage {
	if m == nil {
		return nil
	}
	out := make(map[string]json.RawMessage, len(m))
	for k, v := range m {
		out[k] = json.RawMessage(v)
	}
	return out
}
