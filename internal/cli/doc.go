// Package cli is the sluice command: its subcommands and their
// dispatcher, in a package so that two builds share them. cmd/sluice, in
// the library's module, runs [Commands] as they are; the server's module
// (github.com/sluicehq/sluice/serve) builds the same program with its
// "serve" in place of the placeholder that says where the server is. The
// command's documentation is cmd/sluice's.
package cli
