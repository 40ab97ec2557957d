// Package cgroup limits a local sandbox's memory, processes and CPU with a
// control group of its own: New finds a usable hierarchy (v2 when its
// controllers are usable, else v1, a hierarchy per controller) and makes a
// parent group "agentrunner" beside the runner's own; Parent.Create makes
// each sandbox's group under it with the limits written. On v2 a process
// is started straight into its group (Group.FD, CLONE_INTO_CGROUP); on v1
// it is moved in after it starts (Group.NeedsPid, Group.Add). Counters tell
// which limit a process that died ran into.
//
// Control groups are Linux's: the code is in _linux.go files, and the
// package is empty elsewhere.
package cgroup
