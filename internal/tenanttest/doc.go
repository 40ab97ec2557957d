// Package tenanttest holds no code: its tests are the adversarial suite.
// Each test is one attack a hostile tenant (the agent, a tool it runs, or
// an API caller) tries against a real `runner serve` process driving the
// scripted fake agent, and asserts that the runner's own seams hold:
// nothing written or read outside a sandbox's root, nothing dialled on
// the host for a sandbox, no buffer unbounded, no key crossing a project
// or reaching the sandbox. A fixed attack stays here as a test.
package tenanttest
