package client_test

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/agentrunner/runner/internal/client"
)

// A refusal whose body is not the API's JSON keeps the body as its
// message; a service that is not there says where it was looked for.
func TestClientErrors(t *testing.T) {
	svc := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "upstream down", http.StatusBadGateway)
	}))
	defer svc.Close()
	_, err := (&client.Client{Base: svc.URL}).Get(t.Context(), "/x")
	if err == nil || err.Error() != "502 Bad Gateway: upstream down" {
		t.Errorf("plain-text refusal: %v", err)
	}
	if (&client.Client{Base: svc.URL}).Answers(t.Context(), "/x") {
		t.Error("a 502 answers")
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	base := "http://" + ln.Addr().String()
	ln.Close() // nothing listens there now
	_, err = (&client.Client{Base: base}).Get(context.Background(), "/health")
	if err == nil || !strings.Contains(err.Error(), "is `runner serve` running at "+base) {
		t.Errorf("no service: %v", err)
	}
}

// TestAnswersWaitsForABusyService: a service that is there but slow to
// answer (a loaded machine) is found; it was taken for none after half a
// second, and the CLI then ran a session's turn in-process, where the
// service's lease refused it (TestTerminalAgainstTheService under -race
// at load 13).
func TestAnswersWaitsForABusyService(t *testing.T) {
	svc := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(700 * time.Millisecond) // the busy service, not a wait for the test
		w.WriteHeader(http.StatusOK)
	}))
	defer svc.Close()
	if !(&client.Client{Base: svc.URL}).Answers(t.Context(), "/health") {
		t.Error("a service answering in 0.7 s was taken for none")
	}
}
