package mysqlstore_test

import (
	"context"
	"errors"
	"testing"

	"github.com/sluicehq/sluice/algorithms"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/stores/mysqlstore"
	"github.com/sluicehq/sluice/stores/mysqlstore/mysqltest"
	"github.com/sluicehq/sluice/stores/storetest"
)

// TestConformance runs the conformance suite on the store, every subtest
// on a table of its own in one server.
func TestConformance(t *testing.T) {
	t.Parallel()
	storetest.Run(t, store(newDB(t, mysqltest.Start(t))))
}

// TestKilled kills the server: a call on a connection it held, and a
// call while it is down, fail with errors package policy counts as the
// store's failure; an invalid request is not one.
func TestKilled(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := mysqltest.Start(t)
	s := newStore(t, newDB(t, srv), mysqlstore.Config{})
	defer s.Close()
	req := core.Request{Key: "k", Algorithm: algorithms.TokenBucket, Limit: core.PerSecond(100), Cost: 1}
	if _, err := s.Apply(ctx, req); err != nil {
		t.Fatal(err)
	}
	bad := req
	bad.Key = ""
	if _, err := s.Apply(ctx, bad); err == nil || policy.IsStoreFailure(err) {
		t.Errorf("an empty key: %v; want an error that is not the store's failure", err)
	}
	if err := srv.Kill(); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		_, err := s.Apply(ctx, req)
		if err == nil || !policy.IsStoreFailure(err) {
			t.Errorf("charge %d with the server killed: %v; want the store's failure", i, err)
		}
		t.Logf("charge %d with the server killed: %v (marked unavailable: %v)", i, err, errors.Is(err, core.ErrUnavailable))
	}
}
