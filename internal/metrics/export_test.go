package metrics

// KnownValues gives the tests the label values Init pre-creates, by the
// name of the metric variable (for OwnerNotifications, its outcome label).
var KnownValues = map[string][]string{
	"PublishRequests":      publishOutcomes,
	"IdempotencyCache":     idempotencyResults,
	"DeliveriesPostponed":  postponeReasons,
	"WorkerInternalErrors": internalErrorStages,
	"DeliveryDuration":     deliveryOutcomes,
	"CircuitTransitions":   circuitTransitions,
	"DeadLettered":         deadLetterReasons,
	"RetentionPruned":      retentionKinds,
	"OwnerNotifications":   notificationOutcomes,
	"RateLimitHits":        {"publish", "delivery"},
	"FilterErrors":         filterErrorReasons,
}

// NotificationTypes gives the tests the owner notification types Init
// pre-creates, by process.
var NotificationTypes = notificationTypes
