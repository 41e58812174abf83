package pgstore

import (
	"os"
	"strings"
	"testing"
)

// TestDocsShowTheSchema checks that docs/stores.md shows the table and
// the function New creates for the default table name, as they are: the
// block of SQL after "<!-- schema: sluice_state -->".
func TestDocsShowTheSchema(t *testing.T) {
	data, err := os.ReadFile("../../docs/stores.md")
	if err != nil {
		t.Fatal(err)
	}
	_, block, ok := strings.Cut(string(data), "<!-- schema: "+DefaultTable+" -->\n```sql\n")
	if !ok {
		t.Fatal("docs/stores.md has no schema block")
	}
	block, _, _ = strings.Cut(block, "\n```\n")
	_, _, stmts := schema(DefaultTable, false)
	want := strings.Join(stmts, ";\n\n") + ";"
	if block != want {
		t.Errorf("docs/stores.md's schema block differs from the code's; it should read:\n%s", want)
	}
}
