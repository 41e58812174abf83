package redisstore_test

import (
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/internal/classifytest"
	"github.com/sluicehq/sluice/redistest"
	"github.com/sluicehq/sluice/stores/storetest"
)

// TestConformanceTLS runs the conformance suite over TLS, to a server
// that requires a client certificate its CA signed (tls-auth-clients
// yes).
func TestConformanceTLS(t *testing.T) {
	t.Parallel()
	ca := redistest.NewCA(t, "sluice test CA")
	srv := redistest.Start(t, redistest.WithTLS(ca), redistest.WithClientAuth())
	client := redis.NewClient(&redis.Options{Addr: srv.TLSAddr(), TLSConfig: classifytest.MutualTLS(t, ca, ca)})
	t.Cleanup(func() { client.Close() })
	storetest.Run(t, func(t *testing.T) core.Store { return newStore(t, client) })
}

// TestTLSFailures makes calls whose TLS handshake fails
// (classifytest.RunTLS): each is the store's failure, which a breaker
// answers by its mode.
func TestTLSFailures(t *testing.T) {
	t.Parallel()
	classifytest.RunTLS(t, classifyStores())
}
