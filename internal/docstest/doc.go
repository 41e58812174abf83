// Package docstest keeps the documentation honest. Its tests hold no
// code of their own; run them with
//
//	go test ./internal/docstest
//
// TestOptionsDocumented and TestNoStaleOptions keep the option
// reference so: they parse sluice's packages and the sluice command, list
// every configuration knob they export (each With… option, each field of
// a Config struct and of core.Request and sluice.Rule, each Default…, Max…
// and Min… constant, the constants of the breaker's modes and of the HTTP
// header sets, the Limit constructors, and every flag of sluice sim,
// inspect and bench), and fail when docs/options.md does not name one in
// its package's section, or names a With… option its package does not
// have.
//
// TestDocsNameExports fails for every `pkg.Name` or `pkg.Type.Member`
// that README.md or a page of docs/ (but the change log) names in inline
// code and sluice's package does not export.
//
// TestSnippetsCompile builds every ```go block of README.md and
// docs/*.md as a reader would paste it, with `go build -overlay`, so that
// nothing is written into the checkout; its doc comment gives the rules a
// block must follow.
//
// TestLayers keeps the structure honest: every import of the root module
// runs down the layers docs/architecture.md declares.
package docstest
