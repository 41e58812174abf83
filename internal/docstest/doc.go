// Package docstest keeps the option reference honest: its test parses
// sluice's packages and the sluice command, lists every configuration
// knob they export (each With… option, each field of a Config struct and
// of core.Request and core.Rule, each Default…, Max… and Min… constant,
// the constants of the breaker's modes and of the HTTP header sets, the
// Limit constructors, and every flag of sluice sim, inspect and bench),
// and fails when docs/options.md does not name one in its package's
// section, or names a With… option its package does not have. Its
// TestLayers keeps the structure honest: every import of the root
// module runs down the layers docs/architecture.md declares.
//
// The package holds no code; run it with
//
//	go test ./internal/docstest
package docstest
