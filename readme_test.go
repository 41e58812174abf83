package sluice_test

import (
	"os"
	"strings"
	"testing"
)

// TestReadmeQuickStart checks that the README's quick start is, line for
// line, the body of Example, which go test runs.
func TestReadmeQuickStart(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	example, err := os.ReadFile("example_test.go")
	if err != nil {
		t.Fatal(err)
	}
	_, block, ok := strings.Cut(string(readme), "```go\n")
	block, _, ok2 := strings.Cut(block, "```")
	if !ok || !ok2 {
		t.Fatal("README.md has no ```go block")
	}
	_, body, ok := strings.Cut(string(example), "func Example() {\n")
	body, _, ok2 = strings.Cut(body, "\n}\n")
	if !ok || !ok2 {
		t.Fatal("example_test.go has no func Example")
	}
	if got, want := lines(block), lines(body); got != want {
		t.Errorf("README quick start and Example differ:\n--- README\n%s\n--- Example\n%s", got, want)
	}
}

// lines returns s with each line's indentation removed.
func lines(s string) string {
	var b strings.Builder
	for line := range strings.SplitSeq(strings.TrimSpace(s), "\n") {
		b.WriteString(strings.TrimSpace(line))
		b.WriteByte('\n')
	}
	return b.String()
}
