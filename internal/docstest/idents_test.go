package docstest

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// sluicePackages maps the names the docs qualify identifiers with to the
// directories of sluice's packages, from root.
var sluicePackages = map[string]string{
	"sluice":       ".",
	"core":         "core",
	"algorithms":   "algorithms",
	"stores":       "stores",
	"memstore":     "stores/memstore",
	"redisstore":   "stores/redisstore",
	"rueidisstore": "stores/rueidisstore",
	"layered":      "stores/layered",
	"casstore":     "stores/casstore",
	"storetest":    "stores/storetest",
	"policy":       "policy",
	"telemetry":    "telemetry",
	"adaptive":     "adaptive",
	"redistest":    "redistest",
	"httplimit":    "contrib/httplimit",
	"grpclimit":    "contrib/grpclimit",
	"limits":       "serve/limits",
}

// qualified finds pkg.Name and pkg.Name.Member in a span of inline code.
var qualified = regexp.MustCompile(`\b([a-z]+)\.([A-Z][A-Za-z0-9_]*)(?:\.([A-Z][A-Za-z0-9_]*))?`)

// inlineCode finds the spans of inline code of a line of Markdown.
var inlineCode = regexp.MustCompile("`[^`]+`")

// TestDocsNameExports fails for every identifier of sluice that README.md
// or a page of docs/ names in inline code, as `pkg.Name` or
// `pkg.Type.Member`, and the package does not export: a function, type,
// constant or variable, or a type's method or field (those of the types it
// embeds included). docs/changes.md is left out: it names what was
// removed. The Go blocks are built by TestSnippetsCompile.
func TestDocsNameExports(t *testing.T) {
	exports := map[string]*pkgExports{}
	checked := 0
	for _, page := range pages(t) {
		if page == "docs/changes.md" {
			continue
		}
		data, err := os.ReadFile(filepath.Join(root, page))
		if err != nil {
			t.Fatal(err)
		}
		fenced := false
		for i, line := range strings.Split(string(data), "\n") {
			if strings.HasPrefix(strings.TrimSpace(line), "```") {
				fenced = !fenced
				continue
			}
			if fenced {
				continue
			}
			for _, span := range inlineCode.FindAllString(line, -1) {
				for _, m := range qualified.FindAllStringSubmatch(span, -1) {
					dir, ok := sluicePackages[m[1]]
					if !ok {
						continue
					}
					e := exports[dir]
					if e == nil {
						e = readExports(t, dir)
						exports[dir] = e
					}
					checked++
					if !e.names[m[2]] {
						t.Errorf("%s:%d names %s.%s, which %s does not export", page, i+1, m[1], m[2], dir)
					} else if m[3] != "" && !memberOf(t, exports, e, m[2], m[3]) {
						t.Errorf("%s:%d names %s.%s.%s: %s.%s has no method or field %s", page, i+1, m[1], m[2], m[3], m[1], m[2], m[3])
					}
				}
			}
		}
	}
	t.Logf("checked %d names", checked)
	if checked < 100 {
		t.Errorf("checked %d names: the extraction is broken", checked)
	}
}

// pkgExports is what one package exports.
type pkgExports struct {
	names    map[string]bool            // top-level identifiers
	methods  map[string]map[string]bool // by type: methods and fields
	embedded map[string][]string        // by type: the package's types it embeds
	aliases  map[string][2]string       // by type alias: the package and type it names
}

// memberOf reports whether typ of e has the method or field name, looking
// through a type alias to the type it names (sluice.Limit is core.Limit).
func memberOf(t *testing.T, exports map[string]*pkgExports, e *pkgExports, typ, name string) bool {
	if e.members(typ)[name] {
		return true
	}
	to, ok := e.aliases[typ]
	if !ok {
		return false
	}
	dir, ok := sluicePackages[to[0]]
	if !ok {
		return false
	}
	target := exports[dir]
	if target == nil {
		target = readExports(t, dir)
		exports[dir] = target
	}
	return target.members(to[1])[name]
}

// members returns the methods and fields of typ, those of the types it
// embeds included.
func (e *pkgExports) members(typ string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]bool{}
	var add func(string)
	add = func(typ string) {
		if seen[typ] {
			return
		}
		seen[typ] = true
		for m := range e.methods[typ] {
			out[m] = true
		}
		for _, emb := range e.embedded[typ] {
			add(emb)
		}
	}
	add(typ)
	return out
}

// readExports parses the non-test files of dir, from root.
func readExports(t *testing.T, dir string) *pkgExports {
	t.Helper()
	e := &pkgExports{names: map[string]bool{}, methods: map[string]map[string]bool{}, embedded: map[string][]string{}, aliases: map[string][2]string{}}
	member := func(typ, name string) {
		if e.methods[typ] == nil {
			e.methods[typ] = map[string]bool{}
		}
		e.methods[typ][name] = true
	}
	files, err := filepath.Glob(filepath.Join(root, dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if d.Recv == nil {
					e.names[d.Name.Name] = true
					continue
				}
				typ := d.Recv.List[0].Type
				if star, ok := typ.(*ast.StarExpr); ok {
					typ = star.X
				}
				if ix, ok := typ.(*ast.IndexExpr); ok {
					typ = ix.X
				}
				if id, ok := typ.(*ast.Ident); ok {
					member(id.Name, d.Name.Name)
				}
			case *ast.GenDecl:
				for _, spec := range d.Specs {
					switch sp := spec.(type) {
					case *ast.ValueSpec:
						for _, n := range sp.Names {
							e.names[n.Name] = true
						}
					case *ast.TypeSpec:
						e.names[sp.Name.Name] = true
						if sel, ok := sp.Type.(*ast.SelectorExpr); ok && sp.Assign.IsValid() {
							if pkg, ok := sel.X.(*ast.Ident); ok {
								e.aliases[sp.Name.Name] = [2]string{pkg.Name, sel.Sel.Name}
							}
						}
						var fields *ast.FieldList
						switch ty := sp.Type.(type) {
						case *ast.StructType:
							fields = ty.Fields
						case *ast.InterfaceType:
							fields = ty.Methods
						}
						if fields == nil {
							continue
						}
						for _, fld := range fields.List {
							for _, n := range fld.Names {
								member(sp.Name.Name, n.Name)
							}
							if len(fld.Names) == 0 { // embedded
								typ := fld.Type
								if star, ok := typ.(*ast.StarExpr); ok {
									typ = star.X
								}
								switch ty := typ.(type) {
								case *ast.Ident:
									e.embedded[sp.Name.Name] = append(e.embedded[sp.Name.Name], ty.Name)
									member(sp.Name.Name, ty.Name)
								case *ast.SelectorExpr:
									member(sp.Name.Name, ty.Sel.Name)
								}
							}
						}
					}
				}
			}
		}
	}
	return e
}
