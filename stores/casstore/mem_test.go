package casstore_test

import (
	"bytes"
	"context"
	"sync"
	"time"

	"github.com/sluicehq/sluice/stores/casstore"
)

// memBackend is a [casstore.Backend] in memory, what an adapter to a
// database does in the smallest form: a map under a mutex, a clock, and
// for the tests, conflicts on demand.
type memBackend struct {
	mu    sync.Mutex
	rows  map[string]memRow
	clock func() time.Time // the backend's clock; time.Now if nil

	// conflict, when set, is asked before each Swap whether this one
	// finds its keys changed by someone else: it then writes nothing and
	// returns the states as they are, as a database does when another
	// process wrote between the store's read and its Swap.
	conflict func() bool
	swaps    int // Swap calls
}

type memRow struct {
	state []byte
	exp   int64
}

func newMem() *memBackend { return &memBackend{rows: map[string]memRow{}} }

func (m *memBackend) now() int64 {
	if m.clock == nil {
		return time.Now().UnixMicro()
	}
	return m.clock().UnixMicro()
}

// Swap checks and writes under the mutex: one atomic step.
func (m *memBackend) Swap(_ context.Context, b *casstore.Batch) (casstore.Reply, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.swaps++
	r := casstore.Reply{Clock: m.now(), Cur: make([][]byte, len(b.Keys))}
	ok := b.At == 0 || b.At <= r.Clock && b.At >= r.Clock-b.Lag
	for i, k := range b.Keys {
		if row, found := m.rows[string(k)]; found {
			r.Cur[i] = row.state
		}
		// nil (no state) differs from every state, the empty one too.
		ok = ok && (r.Cur[i] == nil) == (b.Old[i] == nil) && bytes.Equal(r.Cur[i], b.Old[i])
	}
	if !ok || m.conflict != nil && m.conflict() {
		return r, nil
	}
	for i, k := range b.Keys {
		if b.New[i] != nil {
			m.rows[string(k)] = memRow{bytes.Clone(b.New[i]), b.Exp[i]}
		}
	}
	r.Swapped = true
	return r, nil
}

func (m *memBackend) Delete(_ context.Context, key []byte) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.rows, string(key))
	return nil
}

func (m *memBackend) Expire(_ context.Context, before int64, limit int) (int64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var n int64
	for k, row := range m.rows {
		if n == int64(limit) {
			break
		}
		if row.exp < before {
			delete(m.rows, k)
			n++
		}
	}
	return n, nil
}
