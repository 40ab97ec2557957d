package client_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"

	"github.com/agentrunner/runner/internal/client"
)

// A running service's sessions, and a refusal: what `runner sessions`
// does. The stand-in service here wants the token "t".
func ExampleClient() {
	svc := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer t" {
			w.WriteHeader(http.StatusUnauthorized)
			fmt.Fprint(w, `{"ok":false,"error":"missing or wrong bearer token"}`)
			return
		}
		fmt.Fprint(w, `{"sessions":[]}`)
	}))
	defer svc.Close()
	ctx := context.Background()

	c := client.Client{Base: svc.URL, Token: "t"}
	body, err := c.Get(ctx, "/v1/sessions")
	fmt.Println(string(body), err)

	wrong := client.Client{Base: svc.URL, Token: "guess"}
	_, err = wrong.Get(ctx, "/v1/sessions")
	var se *client.StatusError
	if errors.As(err, &se) {
		fmt.Println(se.Status, "-", se.Message)
	}
	// Output:
	// {"sessions":[]} <nil>
	// 401 Unauthorized - missing or wrong bearer token
}
