// Package eventlog holds a turn's path from event to ledger and to
// followers: Log commits a turn's events to the store in groups, off the
// harness's reader, and Hubs fans a session's live events out to the
// followers that stream it.
//
// The two meet at the commit: a turn publishes each event to its
// session's Hub before the Log commits it, and tells the Hub each
// commit's last sequence number (Options.Saved → Hub.Committed). A
// follower subscribes, then reads the store: the Hub hands it what was
// published but not yet committed, so no event falls between the two.
//
// Concurrency: a Log is written by one turn (Add from any goroutine,
// Finish once); Hubs and Hub are safe for concurrent use.
package eventlog
