// Package jobs is the family of background and scheduled agent jobs: a
// job is a turn request kept durably and run later, once or on a
// schedule, with retries for infrastructure faults only and signed
// webhooks when it ends. Queue is what the API calls; jobs/river is the
// implementation, on River over the runner's SQLite or PostgreSQL.
//
// This package holds the types, their validation (schedules, webhook
// URLs, limits) and the webhook signature, so that the API and the tests
// share one definition. It runs nothing and opens nothing.
package jobs
