package httpapi

import (
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/hookline/hookline/internal/audit"
	"github.com/hookline/hookline/internal/dlq"
)

// recoveryCounts is the answer of a dry run: what the recovery would cover
// if it started now.
type recoveryCounts struct {
	DryRun   bool         `json:"dry_run"`
	Total    int          `json:"total"`
	Recovery dlq.Recovery `json:"recovery"`
}

// recoverWebhook starts a recovery of what a webhook failed or missed over
// a window of event times: 202 with the batch operation, like a batch
// retry; with "dry_run": true, 200 with the counts and nothing started.
func (s *Server) recoverWebhook(c *gin.Context) {
	hookID, err := pathID(c, "id")
	if err != nil {
		abort(c, err)
		return
	}
	var in dlq.RecoverRequest
	if err := decodeJSON(c, maxDLQBody, &in); err != nil {
		abort(c, err)
		return
	}
	tenantID := principal(c).TenantID
	if in.DryRun {
		rec, err := s.dlq.CountRecovery(c.Request.Context(), tenantID, hookID, in)
		if err != nil {
			abort(c, mapDLQErr(err))
			return
		}
		total := 0
		for _, n := range []*int{rec.Failed, rec.Missed} {
			if n != nil {
				total += *n
			}
		}
		c.JSON(http.StatusOK, recoveryCounts{DryRun: true, Total: total, Recovery: rec})
		return
	}
	b, err := s.dlq.Recover(c.Request.Context(), tenantID, hookID, in)
	if err != nil {
		abort(c, mapDLQErr(err))
		return
	}
	s.recordAudit(c, audit.RecoveryCreated, "webhook", hookID, map[string]any{"batch_operation_id": b.ID,
		"from": b.Recovery.From, "to": b.Recovery.To, "include": b.Recovery.Include, "requests_per_second": b.RequestsPerSecond})
	logger(c).Info("webhook recovery created", "batch_operation_id", b.ID.String(), "webhook_id", hookID.String(),
		"tenant_id", tenantID.String(), "requests_per_second", b.RequestsPerSecond)
	c.JSON(http.StatusAccepted, gin.H{"batch_operation_id": b.ID, "batch_operation": b})
}
