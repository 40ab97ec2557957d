package local

// DetachStaleDisks is the start-up sweep of the disks a killed runner
// left mounted, for the tests to run over the whole temp dir: a killed
// test's sandboxes leave theirs under its TempDir, which no later
// provider sweeps.
var DetachStaleDisks = detachStale
