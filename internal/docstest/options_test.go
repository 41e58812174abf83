package docstest

import (
	"fmt"
	"go/ast"
	"go/doc"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// root is the repository's root, from this package's directory.
var root = filepath.Join("..", "..")

// optionsDoc is the page under test, from root.
const optionsDoc = "docs/options.md"

// A pkgSpec names a package directory, from root, and the section of
// optionsDoc ("## " and the heading) that must document it.
type pkgSpec struct {
	dir, section string
	// structs are further struct types whose exported fields are
	// options, besides those whose name ends in "Config".
	structs []string
	// extra are further identifiers the section must name, such as a
	// variable or a constant that is an option's value.
	extra []string
	// also is a package whose options this one's section may name too:
	// core, whose Limit package sluice names (sluice.Limit.WithBurst).
	also string
}

var packages = []pkgSpec{
	{dir: ".", section: "sluice", structs: []string{"Rule"}, extra: []string{"Inf"}, also: "core"},
	{dir: "core", section: "core", structs: []string{"Request"}},
	{dir: "algorithms", section: "algorithms"},
	{dir: "stores/memstore", section: "stores/memstore"},
	{dir: "stores/redisstore", section: "stores/redisstore"},
	{dir: "stores/rueidisstore", section: "stores/rueidisstore"},
	{dir: "stores/layered", section: "stores/layered"},
	{dir: "policy", section: "policy"},
	{dir: "adaptive", section: "adaptive"},
	{dir: "telemetry", section: "telemetry"},
	{dir: "contrib/httplimit", section: "contrib/httplimit", extra: []string{"HeaderXForwardedFor", "HeaderForwarded"}},
	{dir: "contrib/grpclimit", section: "contrib/grpclimit"},
	{dir: "serve", section: "serve"},
	{dir: "serve/limits", section: "serve/limits", structs: []string{"Options"}},
}

// optionTypes are the types whose constants are choices a user makes (a
// breaker's mode, an HTTP header set) and whose constructors build a
// value a user configures (a Limit).
var optionTypes = []string{"Mode", "Headers", "Limit"}

// commands maps each file of the sluice command (internal/cli, and the
// server's build) that defines a subcommand's flags to the section that
// must document them.
var commands = map[string]string{
	"internal/cli/sim.go":              "sluice sim",
	"internal/cli/rediscli/inspect.go": "sluice inspect",
	"internal/cli/rediscli/bench.go":   "sluice bench",
	"serve/cmd/sluice-serve/serve.go":  "sluice-serve",
}

// An option is one identifier the page must name, and where it is
// declared, for the failure message.
type option struct {
	name string // as the page names it: WithTimeout, Prefix, -limit
	pos  string // file:line
}

// TestOptionsDocumented fails for every option the code exports that
// docs/options.md does not name, in backticks, in its package's section.
func TestOptionsDocumented(t *testing.T) {
	sections := readSections(t)
	for _, p := range packages {
		text, ok := sections[p.section]
		if !ok {
			t.Errorf("%s has no section \"## %s\" for package %s", optionsDoc, p.section, p.dir)
			continue
		}
		opts := packageOptions(t, p)
		if len(opts) == 0 {
			t.Errorf("found no options in %s: the parser is broken", p.dir)
		}
		for _, o := range opts {
			if !mentions(text, o.name) {
				t.Errorf("%s, section \"## %s\", does not name `%s` (%s)", optionsDoc, p.section, o.name, o.pos)
			}
		}
	}
	for file, section := range commands {
		text, ok := sections[section]
		if !ok {
			t.Errorf("%s has no section \"## %s\" for %s", optionsDoc, section, file)
			continue
		}
		flags := commandFlags(t, file)
		if len(flags) == 0 {
			t.Errorf("found no flags in %s: the parser is broken", file)
		}
		for _, o := range flags {
			if !mentions(text, o.name) {
				t.Errorf("%s, section \"## %s\", does not name `%s` (%s)", optionsDoc, section, o.name, o.pos)
			}
		}
	}
}

// withName matches a With… option named in backticks.
var withName = regexp.MustCompile("`(?:[A-Za-z]+\\.)?(With[A-Z][A-Za-z0-9]*)")

// TestNoStaleOptions fails for every With… option a section names that its
// package does not export, such as one removed or renamed since the page
// was written.
func TestNoStaleOptions(t *testing.T) {
	sections := readSections(t)
	for _, p := range packages {
		text, ok := sections[p.section]
		if !ok {
			continue // TestOptionsDocumented reports it
		}
		have := map[string]bool{}
		for _, o := range packageOptions(t, p) {
			have[o.name] = true
		}
		if p.also != "" {
			for _, o := range packageOptions(t, pkgSpec{dir: p.also}) {
				have[o.name] = true
			}
		}
		for _, m := range withName.FindAllStringSubmatch(text, -1) {
			if !have[m[1]] {
				t.Errorf("%s, section \"## %s\", names `%s`, which %s does not export", optionsDoc, p.section, m[1], p.dir)
			}
		}
	}
}

// mentions reports whether text names name in backticks, alone or
// qualified by a type or package (`name`, `Limit.name`, `core.name`), and
// followed by the closing backtick, arguments, a space, or a value
// (`name(…)`, `-flag N`, `name: …`).
func mentions(text, name string) bool {
	re := regexp.MustCompile("`(?:[A-Za-z][A-Za-z0-9]*\\.)?" + regexp.QuoteMeta(name) + "[`( :=\\[{]")
	return re.MatchString(text)
}

// readSections splits optionsDoc into its "## " sections, by heading.
func readSections(t *testing.T) map[string]string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root, optionsDoc))
	if err != nil {
		t.Fatal(err)
	}
	sections := map[string]string{}
	var heading string
	var body strings.Builder
	flush := func() {
		if heading != "" {
			sections[heading] = body.String()
		}
		body.Reset()
	}
	for line := range strings.Lines(string(data)) {
		if h, ok := strings.CutPrefix(strings.TrimRight(line, "\n"), "## "); ok {
			flush()
			heading = h
			continue
		}
		body.WriteString(line)
	}
	flush()
	return sections
}

// packageOptions parses the non-test files of p.dir and returns its
// options: With… functions and methods; the exported fields of structs
// named …Config and of p.structs; Default…, Max… and Min… constants; the
// constants of the optionTypes and their constructors; and p.extra.
func packageOptions(t *testing.T, p pkgSpec) []option {
	t.Helper()
	fset := token.NewFileSet()
	dir := filepath.Join(root, p.dir)
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var files []*ast.File
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, name), nil, parser.ParseComments)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	dp, err := doc.NewFromFiles(fset, files, "github.com/sluicehq/sluice/"+p.dir)
	if err != nil {
		t.Fatal(err)
	}
	var opts []option
	add := func(name string, pos token.Pos) {
		if !ast.IsExported(name) {
			return
		}
		at := fset.Position(pos)
		rel, err := filepath.Rel(root, at.Filename)
		if err != nil {
			rel = at.Filename
		}
		opts = append(opts, option{name: name, pos: rel + ":" + strconv.Itoa(at.Line)})
	}
	isWith := func(name string) bool { return strings.HasPrefix(name, "With") }
	isBound := func(name string) bool {
		if strings.HasSuffix(name, "Key") {
			return false // an attribute key, such as telemetry's MaxWaitKey
		}
		return strings.HasPrefix(name, "Default") || strings.HasPrefix(name, "Max") || strings.HasPrefix(name, "Min")
	}
	consts := func(vs []*doc.Value, all bool) {
		for _, v := range vs {
			for _, n := range v.Names {
				if all || isBound(n) {
					add(n, v.Decl.Pos())
				}
			}
		}
	}
	for _, f := range dp.Funcs {
		if isWith(f.Name) {
			add(f.Name, f.Decl.Pos())
		}
	}
	consts(dp.Consts, false)
	for _, typ := range dp.Types {
		optionType := slices.Contains(optionTypes, typ.Name)
		consts(typ.Consts, optionType)
		for _, f := range typ.Funcs { // constructors, and options that return typ
			if isWith(f.Name) || optionType {
				add(f.Name, f.Decl.Pos())
			}
		}
		for _, m := range typ.Methods {
			if isWith(m.Name) {
				add(m.Name, m.Decl.Pos())
			}
		}
		if optionType {
			for _, v := range typ.Vars { // core.Inf
				for _, n := range v.Names {
					add(n, v.Decl.Pos())
				}
			}
		}
		if strings.HasSuffix(typ.Name, "Config") || slices.Contains(p.structs, typ.Name) {
			for _, spec := range typ.Decl.Specs {
				st, ok := spec.(*ast.TypeSpec).Type.(*ast.StructType)
				if !ok {
					continue
				}
				for _, field := range st.Fields.List {
					for _, n := range field.Names {
						add(n.Name, n.Pos())
					}
				}
			}
		}
	}
	for _, name := range p.extra {
		pos := declared(files, name)
		if !pos.IsValid() {
			t.Errorf("%s declares no %s, which pkgSpec.extra names", p.dir, name)
			continue
		}
		add(name, pos)
	}
	return opts
}

// declared returns where files declare name at their top level (a
// function, type, constant or variable), or token.NoPos.
func declared(files []*ast.File, name string) token.Pos {
	for _, f := range files {
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if d.Recv == nil && d.Name.Name == name {
					return d.Name.Pos()
				}
			case *ast.GenDecl:
				for _, spec := range d.Specs {
					switch sp := spec.(type) {
					case *ast.TypeSpec:
						if sp.Name.Name == name {
							return sp.Name.Pos()
						}
					case *ast.ValueSpec:
						for _, n := range sp.Names {
							if n.Name == name {
								return n.Pos()
							}
						}
					}
				}
			}
		}
	}
	return token.NoPos
}

// flagMethods are the flag.FlagSet methods that define a flag whose name
// is their first argument.
var flagMethods = []string{"Bool", "Duration", "Float64", "Func", "Int", "Int64", "String", "TextVar", "Uint", "Uint64", "Var", "BoolFunc"}

// commandFlags returns the flags file defines, as "-name": each call of a
// flag.FlagSet method on a variable named fs, and of the command's own
// textFlag(fs, name, …) helper, with a constant name.
func commandFlags(t *testing.T, file string) []option {
	t.Helper()
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, filepath.Join(root, file), nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var flags []option
	ast.Inspect(f, func(n ast.Node) bool {
		call, ok := n.(*ast.CallExpr)
		if !ok {
			return true
		}
		var nameArg ast.Expr
		switch fn := call.Fun.(type) {
		case *ast.SelectorExpr:
			if x, ok := fn.X.(*ast.Ident); ok && x.Name == "fs" && slices.Contains(flagMethods, fn.Sel.Name) && len(call.Args) > 0 {
				nameArg = call.Args[0]
				if fn.Sel.Name == "Var" || fn.Sel.Name == "TextVar" {
					nameArg = call.Args[1]
				}
			}
		case *ast.Ident:
			if fn.Name == "textFlag" && len(call.Args) > 1 {
				nameArg = call.Args[1]
			}
		}
		lit, ok := nameArg.(*ast.BasicLit)
		if !ok || lit.Kind != token.STRING {
			return true
		}
		name, err := strconv.Unquote(lit.Value)
		if err != nil {
			t.Fatalf("%s: flag name %s: %v", fset.Position(lit.Pos()), lit.Value, err)
		}
		flags = append(flags, option{name: "-" + name, pos: fmt.Sprintf("%s:%d", file, fset.Position(lit.Pos()).Line)})
		return true
	})
	return flags
}

// TestListOptions prints, with -v, every option the page must name: a
// checklist for whoever writes it.
func TestListOptions(t *testing.T) {
	if !testing.Verbose() {
		t.Skip("lists the options with -v")
	}
	for _, p := range packages {
		for _, o := range packageOptions(t, p) {
			t.Logf("## %s: %s (%s)", p.section, o.name, o.pos)
		}
	}
	for file, section := range commands {
		for _, o := range commandFlags(t, file) {
			t.Logf("## %s: %s (%s)", section, o.name, o.pos)
		}
	}
}
