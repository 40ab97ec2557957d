// Package storetest is the conformance suite of store.Store. Every
// implementation's tests call Run, and its benchmarks call Bench, so all
// implementations are held to the same contract and measured the same way.
package storetest
