package docstest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"go/types"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// A snippet is one ```go block of a page.
type snippet struct {
	page  string // from root
	line  int    // of the block's first line of code
	code  string
	quote string // the file it quotes, from a "<!-- quote: FILE -->" line before it
}

// pages returns the pages whose snippets must compile: README.md and
// docs/*.md, from root.
func pages(t *testing.T) []string {
	t.Helper()
	docs, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	out := []string{"README.md"}
	for _, d := range docs {
		rel, err := filepath.Rel(root, d)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, filepath.ToSlash(rel))
	}
	return out
}

// quoteMark names the file a snippet quotes, on the line before it.
var quoteMark = regexp.MustCompile(`^<!-- quote: (\S+) -->$`)

// readSnippets returns the ```go blocks of page.
func readSnippets(t *testing.T, page string) []snippet {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root, page))
	if err != nil {
		t.Fatal(err)
	}
	var (
		out    []snippet
		cur    *snippet
		prev   string
		indent string // of the block's fence, as in a list item
	)
	for i, line := range strings.Split(string(data), "\n") {
		trimmed := strings.TrimLeft(line, " ")
		switch {
		case cur == nil && trimmed == "```go":
			cur = &snippet{page: page, line: i + 2}
			indent = line[:len(line)-len(trimmed)]
			if m := quoteMark.FindStringSubmatch(strings.TrimSpace(prev)); m != nil {
				cur.quote = m[1]
			}
		case cur != nil && line == indent+"```":
			out = append(out, *cur)
			cur = nil
		case cur != nil:
			cur.code += strings.TrimPrefix(line, indent) + "\n"
		}
		prev = line
	}
	return out
}

// imports maps the package names snippets use to their import paths.
var imports = map[string]string{
	"context":      "context",
	"errors":       "errors",
	"fmt":          "fmt",
	"log":          "log",
	"slog":         "log/slog",
	"net":          "net",
	"http":         "net/http",
	"httptest":     "net/http/httptest",
	"os":           "os",
	"strings":      "strings",
	"strconv":      "strconv",
	"sync":         "sync",
	"atomic":       "sync/atomic",
	"time":         "time",
	"testing":      "testing",
	"synctest":     "testing/synctest",
	"tls":          "crypto/tls",
	"x509":         "crypto/x509",
	"redis":        "github.com/redis/go-redis/v9",
	"logging":      "github.com/redis/go-redis/v9/logging",
	"rueidis":      "github.com/redis/rueidis",
	"grpc":         "google.golang.org/grpc",
	"sluice":       "github.com/sluicehq/sluice",
	"core":         "github.com/sluicehq/sluice/core",
	"algorithms":   "github.com/sluicehq/sluice/algorithms",
	"stores":       "github.com/sluicehq/sluice/stores",
	"memstore":     "github.com/sluicehq/sluice/stores/memstore",
	"redisstore":   "github.com/sluicehq/sluice/stores/redisstore",
	"rueidisstore": "github.com/sluicehq/sluice/stores/rueidisstore",
	"layered":      "github.com/sluicehq/sluice/stores/layered",
	"casstore":     "github.com/sluicehq/sluice/stores/casstore",
	"storetest":    "github.com/sluicehq/sluice/stores/storetest",
	"policy":       "github.com/sluicehq/sluice/policy",
	"telemetry":    "github.com/sluicehq/sluice/telemetry",
	"adaptive":     "github.com/sluicehq/sluice/adaptive",
	"redistest":    "github.com/sluicehq/sluice/redistest",
	"httplimit":    "github.com/sluicehq/sluice/contrib/httplimit",
	"grpclimit":    "github.com/sluicehq/sluice/contrib/grpclimit",
	"pgxpool":      "github.com/jackc/pgx/v5/pgxpool",
	"pgstore":      "github.com/sluicehq/sluice/stores/pgstore",
}

// modules names the nested module that builds a snippet importing a
// package: those the root module does not require. Every other snippet
// builds in the root module.
var modules = map[string]string{
	"grpc":      "contrib/grpclimit",
	"grpclimit": "contrib/grpclimit",
	"pgxpool":   "stores/pgstore",
	"pgstore":   "stores/pgstore",
}

// givens are what a snippet may use without declaring it: the variables
// and functions the text around it says the reader has (a store, a
// context, a handler), by name, with their types. A snippet that uses a
// name it neither declares nor finds here fails the test.
var givens = map[string]string{
	"ctx":             "context.Context",
	"t":               "*testing.T",
	"store":           "core.Store",
	"remote":          "core.Store",
	"breaker":         "*policy.Breaker",
	"client":          "*redis.Client",
	"clusterClient":   "*redis.ClusterClient",
	"opts":            "*redis.Options",
	"addr":            "string",
	"key":             "string",
	"userID":          "string",
	"mux":             "http.Handler",
	"api":             "http.Handler",
	"rules":           "[]sluice.Rule",
	"initial":         "core.Limit",
	"law":             "adaptive.Law",
	"tlsConfig":       "*tls.Config",
	"secretFromVault": "[]byte",
	"logDenial":       "func(core.Request, core.Decision)",
	"blocked":         "interface{ Contains(string) bool }",
	"warn":            "func(core.Request)",
	"callDownstream":  "func() (*http.Response, error)",
	"isOverload":      "func(*http.Response, error) bool",
	"limiter":         "*sluice.Limiter",
	"limited":         "func(core.Store, core.Limit) http.Handler",
	"record":          "func(core.Request, core.Decision, error)",
	"newMyStore":      "func(*testing.T) core.Store",
}

// pageGivens are givens of one page, in place of those of the same name.
var pageGivens = map[string]map[string]string{
	// The client of grpc.md's client side is a gRPC client's stub.
	"docs/grpc.md": {
		"client": "interface{ Check(context.Context, any) (any, error) }",
		"req":    "any",
	},
}

// TestSnippetsCompile builds every ```go block of README.md and
// docs/*.md as a reader would paste it: a block of declarations (types,
// functions) into a file, any other block into a function. A block may
// use, without declaring them, the names in givens (a store, a context, a
// handler: what the page says the reader has); the test adds the imports
// it needs. The variables a block declares at its top level may be left
// for code after it to use, but not an error: every err a snippet gets, it
// checks. A block preceded by "<!-- quote: FILE -->" instead quotes FILE,
// which go test builds and runs: its lines must be FILE's, in order.
func TestSnippetsCompile(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Fatalf("the go command is needed to build the snippets: %v", err)
	}
	absRoot, err := filepath.Abs(root)
	if err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	// The snippets of each module: the root's, and those of the nested
	// modules that alone require what a snippet imports (see modules).
	type build struct {
		dir     string // the module's directory
		overlay map[string]string
		pkgs    []string
	}
	builds := map[string]*build{".": {dir: absRoot, overlay: map[string]string{}}}
	for _, m := range modules {
		builds[m] = &build{dir: filepath.Join(absRoot, filepath.FromSlash(m)), overlay: map[string]string{}}
	}
	n := 0
	for _, page := range pages(t) {
		for _, s := range readSnippets(t, page) {
			if s.quote != "" {
				checkQuote(t, s)
				continue
			}
			src, module, err := wrap(s, n)
			if err != nil {
				t.Errorf("%s:%d: %v", s.page, s.line, err)
				continue
			}
			b := builds[module]
			file := filepath.Join(tmp, fmt.Sprintf("s%d.go", n))
			if err := os.WriteFile(file, src, 0o644); err != nil {
				t.Fatal(err)
			}
			pkg := fmt.Sprintf("internal/docsnippets/s%d", n)
			b.overlay[filepath.Join(b.dir, pkg, "snippet.go")] = file
			b.pkgs = append(b.pkgs, "./"+pkg)
			n++
		}
	}
	if n < 40 {
		t.Errorf("found %d snippets to build, want more: the extraction is broken", n)
	}
	for name, b := range builds {
		if len(b.pkgs) == 0 {
			continue
		}
		ov, err := json.Marshal(map[string]any{"Replace": b.overlay})
		if err != nil {
			t.Fatal(err)
		}
		ovFile := filepath.Join(tmp, strings.ReplaceAll(name, "/", "_")+".json")
		if err := os.WriteFile(ovFile, ov, 0o644); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command("go", append([]string{"build", "-overlay", ovFile}, b.pkgs...)...)
		cmd.Dir = b.dir
		out, err := cmd.CombinedOutput()
		if err == nil {
			continue
		}
		reported := false
		for line := range strings.Lines(string(out)) {
			if strings.HasPrefix(line, "#") || strings.TrimSpace(line) == "" {
				continue
			}
			t.Errorf("%s", strings.TrimSpace(line))
			reported = true
		}
		if !reported {
			t.Errorf("go build in %s: %v", b.dir, err)
		}
	}
}

// wrap returns the file that builds s as package s<n>, and the module
// that builds it ("." for the root).
func wrap(s snippet, n int) ([]byte, string, error) {
	fset := token.NewFileSet()
	// Declarations, as a file; else statements, in a function.
	decls := true
	file, err := parser.ParseFile(fset, "", "package p\n"+s.code, 0)
	if err != nil {
		decls = false
		file, err = parser.ParseFile(fset, "", "package p\nfunc _() error {\n"+s.code+"\nreturn nil\n}\n", 0)
		if err != nil {
			return nil, "", fmt.Errorf("neither declarations nor statements: %v", err)
		}
	}
	given := givens
	if g, ok := pageGivens[s.page]; ok {
		given = merged(givens, g)
	}
	// The names the block leaves unresolved are packages, predeclared
	// identifiers, givens or mistakes.
	var pkgs, params []string
	seen := map[string]bool{}
	for _, id := range file.Unresolved {
		name := id.Name
		if seen[name] {
			continue
		}
		seen[name] = true
		switch {
		case imports[name] != "":
			pkgs = append(pkgs, name)
		case types.Universe.Lookup(name) != nil:
		case given[name] != "":
			params = append(params, name)
			for _, q := range qualifiers.FindAllStringSubmatch(given[name], -1) {
				pkgs = append(pkgs, q[1])
			}
		default:
			return nil, "", fmt.Errorf("uses %s, which it does not declare: declare it, or add it to the givens of internal/docstest", name)
		}
	}
	slices.Sort(pkgs)
	pkgs = slices.Compact(pkgs)
	slices.Sort(params)

	var b bytes.Buffer
	fmt.Fprintf(&b, "package s%d\n\n", n)
	module := "."
	for _, p := range pkgs {
		fmt.Fprintf(&b, "import %q\n", imports[p])
		if m, ok := modules[p]; ok {
			module = m
		}
	}
	if decls {
		for _, p := range params {
			fmt.Fprintf(&b, "var %s %s\n", p, given[p])
		}
		fmt.Fprintf(&b, "//line %s:%d\n%s", s.page, s.line, s.code)
		return b.Bytes(), module, nil
	}
	b.WriteString("func _(")
	for i, p := range params {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s %s", p, given[p])
	}
	fmt.Fprintf(&b, ") error {\n//line %s:%d\n%s", s.page, s.line, s.code)
	// What the block declares at its top level, code after it may use;
	// but not an error, which the block must check.
	body := file.Decls[0].(*ast.FuncDecl).Body
	b.WriteString("\n")
	for _, name := range topLevelVars(body) {
		if name != "err" && name != "_" {
			fmt.Fprintf(&b, "_ = %s\n", name)
		}
	}
	b.WriteString("return nil\n}\n")
	return b.Bytes(), module, nil
}

// qualifiers finds the packages a given's type names.
var qualifiers = regexp.MustCompile(`\b([a-z]+)\.[A-Z]`)

// topLevelVars returns the variables declared by body's own statements.
func topLevelVars(body *ast.BlockStmt) []string {
	var names []string
	for _, st := range body.List {
		switch st := st.(type) {
		case *ast.AssignStmt:
			if st.Tok == token.DEFINE {
				for _, e := range st.Lhs {
					if id, ok := e.(*ast.Ident); ok {
						names = append(names, id.Name)
					}
				}
			}
		case *ast.DeclStmt:
			if g, ok := st.Decl.(*ast.GenDecl); ok && g.Tok == token.VAR {
				for _, sp := range g.Specs {
					for _, id := range sp.(*ast.ValueSpec).Names {
						names = append(names, id.Name)
					}
				}
			}
		}
	}
	return names
}

// merged returns a's entries with b's in place of those of the same key.
func merged(a, b map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range a {
		out[k] = v
	}
	for k, v := range b {
		out[k] = v
	}
	return out
}

// checkQuote fails unless s's lines, each trimmed, are a run of the
// trimmed lines of the file it quotes.
func checkQuote(t *testing.T, s snippet) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root, s.quote))
	if err != nil {
		t.Errorf("%s:%d quotes %s: %v", s.page, s.line, s.quote, err)
		return
	}
	want := trimmed(s.code)
	have := trimmed(string(data))
	for i := 0; i+len(want) <= len(have); i++ {
		if slices.Equal(have[i:i+len(want)], want) {
			return
		}
	}
	t.Errorf("%s:%d quotes %s, which has no such lines (was one of them changed?)", s.page, s.line, s.quote)
}

// trimmed returns s's lines, each without its indentation.
func trimmed(s string) []string {
	var out []string
	for line := range strings.Lines(strings.TrimSpace(s)) {
		out = append(out, strings.TrimSpace(line))
	}
	return out
}
