package core

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// TestValidateCommonCase: Validate's shortcut for the common request
// accepts and refuses exactly what the full checks do, with the same
// error, over requests that vary one field at a time from a plain charge.
func TestValidateCommonCase(t *testing.T) {
	alg := testAlgorithm{}
	plain := Request{Key: "k", Cost: 1, Terms: &Terms{Algorithm: alg, Limit: PerSecond(10)}}
	variants := map[string]func(*Request){
		"plain":           func(*Request) {},
		"empty key":       func(r *Request) { r.Key = "" },
		"longest key":     func(r *Request) { r.Key = strings.Repeat("k", MaxKeyLen) },
		"key too long":    func(r *Request) { r.Key = strings.Repeat("k", MaxKeyLen+1) },
		"no algorithm":    func(r *Request) { r.Algorithm = nil },
		"cost 0":          func(r *Request) { r.Cost = 0 },
		"cost -1":         func(r *Request) { r.Cost = -1 },
		"cost 2^52":       func(r *Request) { r.Cost = MaxUnits },
		"cost above 2^52": func(r *Request) { r.Cost = MaxUnits + 1 },
		"peek":            func(r *Request) { r.Op = OpPeek },
		"refund":          func(r *Request) { r.Op = OpRefund },
		"reserve":         func(r *Request) { r.Op, r.MaxWait = OpReserve, time.Second },
		"at most":         func(r *Request) { r.Op = OpAtMost },
		"unknown op":      func(r *Request) { r.Op = OpAtMost + 1 },
		"stray MaxWait":   func(r *Request) { r.MaxWait = time.Second },
		"stray MaxQueue":  func(r *Request) { r.MaxQueue = 1 },
		"lease":           func(r *Request) { r.Lease = 7 },
		"negative lease":  func(r *Request) { r.Lease = -1 },
		"explicit now":    func(r *Request) { r.Now = time.Unix(1e9, 0) },
		"now before 1970": func(r *Request) { r.Now = time.Unix(-1, 0) },
		"zero limit":      func(r *Request) { r.Limit = Limit{} },
		"invalid burst":   func(r *Request) { r.Limit = PerSecond(10).WithBurst(0) },
		"unlimited":       func(r *Request) { r.Limit = Inf },
		"refused limit":   func(r *Request) { r.Limit = PerSecond(testRefusedRate) },
	}
	for name, vary := range variants {
		r := plain.Clone()
		vary(&r)
		got, want := r.Validate(), r.validate()
		if (got == nil) != (want == nil) || got != nil && got.Error() != want.Error() {
			t.Errorf("%s: Validate() = %v, the full checks %v", name, got, want)
		}
	}
}

// testRefusedRate is the rate testAlgorithm refuses.
const testRefusedRate = 13

// testAlgorithm refuses limits of testRefusedRate and decides nothing.
type testAlgorithm struct{}

func (testAlgorithm) Name() string { return "test" }

func (testAlgorithm) Validate(l Limit) error {
	if l.Rate() == testRefusedRate {
		return errors.Join(ErrInvalidLimit, errors.New("the test algorithm refuses it"))
	}
	return nil
}

func (testAlgorithm) Horizon(Limit) time.Duration { return time.Second }

func (testAlgorithm) Transition(*State, Step) Decision { return Decision{} }
