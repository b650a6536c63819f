// Package tryit has no code of its own. Its test runs the bash block of
// README.md's "Try it" section with bash -euo pipefail, from the
// repository root, against an api, worker and dlq that package deploy
// builds and starts on a database, RabbitMQ vhost and Redis key prefix of
// their own; so the block cannot drift from the API without the test
// failing.
package tryit
