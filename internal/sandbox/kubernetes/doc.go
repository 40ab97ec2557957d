// Package kubernetes is the sandbox provider on a Kubernetes cluster: a
// sandbox is one pod in a configured namespace, isolated by the cluster's
// RuntimeClass, with the runner's own daemon (package sandboxd) as its
// only process, reached through the API server's portforward subresource.
// The runner therefore needs no route to pod IPs and no privileges: it is
// a control plane, the cluster is the fleet.
//
// Create makes the pod (hardened: non-root, no privilege escalation, all
// capabilities dropped, seccomp RuntimeDefault, read-only root file
// system with writable workspace, agent, home and tmp volumes, no service
// account token, resource requests and limits) and its NetworkPolicy,
// watches the pod until it runs, and checks the daemon's health. A pod
// that stays Pending past Config.PendingTimeout fails with the
// scheduler's reason; an image that cannot be pulled fails at once,
// naming the image. Processes, stdio, files, tree scans and watches, and
// channels (the tool relay, the key gateway's forward) go through the
// daemon, exactly as on Daytona. Destroy deletes the pod and its policy;
// Open reattaches to a running pod by name after a runner restart; a pod
// deleted out of band is reported as sandbox.ErrGone.
//
// The Provider and its sandboxes are safe for concurrent use.
package kubernetes
