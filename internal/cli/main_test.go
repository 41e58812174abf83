package cli

import (
	"bytes"
	"os"
	"strings"
	"testing"
)

func TestCommands(t *testing.T) {
	t.Parallel()
	tests := []struct {
		args       []string
		code       int
		wantStdout string
		wantStderr string
	}{
		{nil, 2, "", "Usage:\n\n\tsluice <command> [flags]"},
		{[]string{"help"}, 0, "\tsim ", ""},
		{[]string{"-h"}, 0, "\tsim ", ""},
		{[]string{"--help"}, 0, "\tsim ", ""},
		{[]string{"frobnicate"}, 2, "", "sluice: unknown command \"frobnicate\"\n"},
		{[]string{"help", "frobnicate"}, 2, "", "sluice: unknown command \"frobnicate\"\n"},
		{[]string{"inspect", "k"}, 2, "", "go run ./cmd/sluice-redis inspect -h"},
		{[]string{"bench"}, 2, "", "go run ./cmd/sluice-redis bench -h"},
		{[]string{"serve"}, 2, "", "cd serve && go run ./cmd/sluice-serve"},
	}
	for _, tt := range tests {
		var stdout, stderr bytes.Buffer
		code := run(tt.args, &stdout, &stderr)
		if code != tt.code {
			t.Errorf("sluice %q = %d, want %d", tt.args, code, tt.code)
		}
		if got := stdout.String(); (tt.wantStdout == "") != (got == "") || !strings.Contains(got, tt.wantStdout) {
			t.Errorf("sluice %q stdout = %q, want it to contain %q", tt.args, got, tt.wantStdout)
		}
		if got := stderr.String(); (tt.wantStderr == "") != (got == "") || !strings.Contains(got, tt.wantStderr) {
			t.Errorf("sluice %q stderr = %q, want it to contain %q", tt.args, got, tt.wantStderr)
		}
	}
}

// TestReadmeShowsSim checks that the output the README shows for its first
// command is what plain `sluice sim` prints.
func TestReadmeShowsSim(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	if code := run([]string{"sim"}, &stdout, &stderr); code != 0 {
		t.Fatalf("sluice sim = %d: %s", code, stderr.String())
	}
	if !strings.Contains(string(readme), "```\n"+stdout.String()+"```\n") {
		t.Errorf("README.md does not show what `sluice sim` prints:\n%s", stdout.String())
	}
}
