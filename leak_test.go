package sluice_test

import (
	"testing"

	"github.com/sluicehq/sluice/internal/leakcheck"
)

// TestMain fails the package's tests if goroutines of sluice, gobreaker
// or a Redis client outlive them (package leakcheck).
func TestMain(m *testing.M) { leakcheck.Main(m) }
