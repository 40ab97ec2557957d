package main

import (
	"bytes"
	"strings"
	"testing"
)

func TestReport(t *testing.T) {
	in := strings.Join([]string{
		`{"Action":"run","Package":"m/a","Test":"TestGated"}`,
		`{"Action":"output","Package":"m/a","Test":"TestGated","Output":"=== RUN   TestGated\n"}`,
		`{"Action":"output","Package":"m/a","Test":"TestGated","Output":"    a_test.go:12: RUNNER_TEST_X is not set; .ci/run sets it\n"}`,
		`{"Action":"output","Package":"m/a","Test":"TestGated","Output":"--- SKIP: TestGated (0.00s)\n"}`,
		`{"Action":"skip","Package":"m/a","Test":"TestGated"}`,
		`{"Action":"output","Package":"m/a","Test":"TestBroken","Output":"    a_test.go:20: got 1, want 2\n"}`,
		`{"Action":"fail","Package":"m/a","Test":"TestBroken"}`,
		`{"Action":"output","Package":"m/a","Test":"TestFine","Output":"noise\n"}`,
		`{"Action":"pass","Package":"m/a","Test":"TestFine"}`,
		`{"Action":"run","Package":"m/a","Test":"TestHangs"}`,
		`{"Action":"output","Package":"m/a","Test":"TestHangs","Output":"    a_test.go:30: waiting\n"}`,
		`{"Action":"output","Package":"m/a","Output":"panic: test timed out after 15m0s\n"}`,
		`{"Action":"output","Package":"m/a","Output":"goroutine 7 [select]:\n"}`,
		`{"Action":"output","Package":"m/a","Output":"FAIL\tm/a\t0.1s\n"}`,
		`{"Action":"fail","Package":"m/a"}`,
	}, "\n")
	var out bytes.Buffer
	if code := report(strings.NewReader(in), &out); code != 1 {
		t.Errorf("exit %d, want 1 for a failed test", code)
	}
	got := out.String()
	for _, want := range []string{"got 1, want 2", "a_test.go:30: waiting", "panic: test timed out", "goroutine 7 [select]", "FAIL\tm/a", "1 tests skipped", "RUNNER_TEST_X is not set; .ci/run sets it", "a.TestGated"} {
		if !strings.Contains(got, want) {
			t.Errorf("report lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "noise") {
		t.Errorf("a passing test's output was shown:\n%s", got)
	}
}
