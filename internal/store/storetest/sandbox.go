package storetest

import (
	"cmp"
	"slices"
	"testing"

	"github.com/agentrunner/runner/internal/errdefs"
	"github.com/agentrunner/runner/internal/store"
)

func testSandboxes(t *testing.T, st store.Store) {
	ctx := t.Context()
	_, err := st.GetSandbox(ctx, "local", "sb1")
	wantErr(t, err, errdefs.ErrNotFound)
	wantErr(t, st.DeleteSandbox(ctx, "local", "sb1"), errdefs.ErrNotFound)

	c := startClock()
	put := func(in store.Sandbox) store.Sandbox {
		t.Helper()
		got := must(st.PutSandbox(ctx, in))(t)
		c.stamped(t, "UpdatedAt", got.UpdatedAt)
		want := in
		want.CreatedAt, want.UpdatedAt = got.CreatedAt, got.UpdatedAt
		if len(want.Labels) == 0 {
			want.Labels = nil // empty labels read back as nil
		}
		equal(t, "PutSandbox", got, want)
		return got
	}
	sb1 := put(store.Sandbox{Provider: "local", ID: "sb1", SessionID: "s1", State: store.SandboxRunning,
		Labels: map[string]string{"runner": "r1", "session": "s1"}})
	c.stamped(t, "CreatedAt", sb1.CreatedAt)
	sb2 := put(store.Sandbox{Provider: "daytona", ID: "sb2", SessionID: "s2", State: store.SandboxPaused})
	sb3 := put(store.Sandbox{Provider: "daytona", ID: "sb3", SessionID: "s1", State: store.SandboxRunning,
		Labels: map[string]string{}})
	equal(t, "GetSandbox", must(st.GetSandbox(ctx, "local", "sb1"))(t), sb1)

	// An update keeps CreatedAt.
	tick()
	upd := must(st.PutSandbox(ctx, store.Sandbox{Provider: "local", ID: "sb1", SessionID: "s3", State: store.SandboxPaused}))(t)
	equal(t, "updated sandbox", upd, store.Sandbox{
		Provider: "local", ID: "sb1", SessionID: "s3", State: store.SandboxPaused,
		CreatedAt: sb1.CreatedAt, UpdatedAt: upd.UpdatedAt,
	})
	if !upd.UpdatedAt.After(sb1.UpdatedAt) {
		t.Fatalf("update left UpdatedAt at %v", upd.UpdatedAt)
	}
	sb1 = upd
	equal(t, "GetSandbox (updated)", must(st.GetSandbox(ctx, "local", "sb1"))(t), sb1)

	all := []store.Sandbox{sb1, sb2, sb3}
	slices.SortFunc(all, func(a, b store.Sandbox) int {
		return cmp.Or(a.CreatedAt.Compare(b.CreatedAt), cmp.Compare(a.Provider, b.Provider), cmp.Compare(a.ID, b.ID))
	})
	for _, tc := range []struct {
		name string
		q    store.SandboxQuery
		want []store.Sandbox
	}{
		{"all", store.SandboxQuery{}, all},
		{"provider", store.SandboxQuery{Provider: "daytona"}, filter(all, func(sb store.Sandbox) bool { return sb.Provider == "daytona" })},
		{"state", store.SandboxQuery{State: store.SandboxPaused}, filter(all, func(sb store.Sandbox) bool { return sb.State == store.SandboxPaused })},
		{"session", store.SandboxQuery{SessionID: "s1"}, []store.Sandbox{sb3}},
		{"provider and state", store.SandboxQuery{Provider: "daytona", State: store.SandboxRunning}, []store.Sandbox{sb3}},
		{"none", store.SandboxQuery{State: store.SandboxDestroyed}, nil},
	} {
		got := must(st.ListSandboxes(ctx, tc.q))(t)
		if len(got) == 0 {
			got = nil
		}
		equal(t, "ListSandboxes "+tc.name, got, tc.want)
	}

	if err := st.DeleteSandbox(ctx, "local", "sb1"); err != nil {
		t.Fatal(err)
	}
	_, err = st.GetSandbox(ctx, "local", "sb1")
	wantErr(t, err, errdefs.ErrNotFound)
	wantErr(t, st.DeleteSandbox(ctx, "local", "sb1"), errdefs.ErrNotFound)
	equal(t, "ListSandboxes after delete", len(must(st.ListSandboxes(ctx, store.SandboxQuery{}))(t)), 2)

	for _, bad := range []store.Sandbox{
		{ID: "x", State: store.SandboxRunning},
		{Provider: "local", State: store.SandboxRunning},
		{Provider: "local", ID: "x"},
		{Provider: "local", ID: "x", State: "gone"},
	} {
		_, err := st.PutSandbox(ctx, bad)
		wantErr(t, err, errdefs.ErrInvalid)
	}
}

func testSecrets(t *testing.T, st store.Store) {
	ctx := t.Context()
	wantErr(t, st.DeleteSecret(ctx, "daytona", "k1"), errdefs.ErrNotFound)
	equal(t, "ListSecrets (empty)", len(must(st.ListSecrets(ctx, store.SecretQuery{}))(t)), 0)

	c := startClock()
	put := func(in store.Secret) store.Secret {
		t.Helper()
		got := must(st.PutSecret(ctx, in))(t)
		c.stamped(t, "CreatedAt", got.CreatedAt)
		in.CreatedAt = got.CreatedAt
		equal(t, "PutSecret", got, in)
		return got
	}
	k1 := put(store.Secret{Provider: "daytona", ID: "k1", Name: "runner-s1-key", SessionID: "s1"})
	k2 := put(store.Secret{Provider: "daytona", ID: "k2", Name: "runner-s2-key", SessionID: "s2"})
	k3 := put(store.Secret{Provider: "other", ID: "k3", Name: "n3", SessionID: "s1"})

	// An update keeps CreatedAt.
	tick()
	upd := must(st.PutSecret(ctx, store.Secret{Provider: "daytona", ID: "k1", Name: "renamed", SessionID: "s9"}))(t)
	equal(t, "updated secret", upd, store.Secret{Provider: "daytona", ID: "k1", Name: "renamed", SessionID: "s9", CreatedAt: k1.CreatedAt})
	k1 = upd

	all := []store.Secret{k1, k2, k3}
	slices.SortFunc(all, func(a, b store.Secret) int {
		return cmp.Or(a.CreatedAt.Compare(b.CreatedAt), cmp.Compare(a.Provider, b.Provider), cmp.Compare(a.ID, b.ID))
	})
	for _, tc := range []struct {
		name string
		q    store.SecretQuery
		want []store.Secret
	}{
		{"all", store.SecretQuery{}, all},
		{"provider", store.SecretQuery{Provider: "daytona"}, filter(all, func(s store.Secret) bool { return s.Provider == "daytona" })},
		{"session", store.SecretQuery{SessionID: "s1"}, []store.Secret{k3}},
		{"both", store.SecretQuery{Provider: "daytona", SessionID: "s2"}, []store.Secret{k2}},
		{"none", store.SecretQuery{Provider: "nope"}, nil},
	} {
		got := must(st.ListSecrets(ctx, tc.q))(t)
		if len(got) == 0 {
			got = nil
		}
		equal(t, "ListSecrets "+tc.name, got, tc.want)
	}

	if err := st.DeleteSecret(ctx, "daytona", "k1"); err != nil {
		t.Fatal(err)
	}
	wantErr(t, st.DeleteSecret(ctx, "daytona", "k1"), errdefs.ErrNotFound)
	equal(t, "ListSecrets after delete", len(must(st.ListSecrets(ctx, store.SecretQuery{}))(t)), 2)

	for _, bad := range []store.Secret{{ID: "x"}, {Provider: "daytona"}} {
		_, err := st.PutSecret(ctx, bad)
		wantErr(t, err, errdefs.ErrInvalid)
	}
}
