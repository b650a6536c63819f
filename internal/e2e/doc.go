// Package e2e holds end-to-end tests: an api, delivery workers and a dlq
// recorder wired together in one test process against the real Postgres,
// Redis and RabbitMQ, delivering to real HTTP receivers.
package e2e
