package ratekeeper_test

import (
	"go/ast"
	"go/doc"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/ratekeeper/ratekeeper"
)

// optionsSource returns the declaration of the wiring's Options struct, as
// its source writes it, comments included.
func optionsSource(t *testing.T) string {
	t.Helper()
	const file = "wiring/wiring.go"
	src, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, file, src, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.TYPE {
			continue
		}
		for _, spec := range g.Specs {
			ts := spec.(*ast.TypeSpec)
			if ts.Name.Name == "Options" {
				return "type " + string(src[fset.Position(ts.Pos()).Offset:fset.Position(ts.End()).Offset])
			}
		}
	}
	t.Fatalf("%s declares no Options", file)
	return ""
}

// asComment indents Go source as a code block of a doc comment.
func asComment(src string) string {
	var b strings.Builder
	for line := range strings.Lines(src) {
		line = strings.TrimRight(line, "\n")
		if line == "" {
			b.WriteString("//\n")
			continue
		}
		b.WriteString("//\t" + line + "\n")
	}
	return b.String()
}

// TestOptionsDocListsEveryField: `go doc github.com/ratekeeper/ratekeeper
// Options` prints the alias's doc comment, not the fields of the type it
// names; the comment therefore carries the declaration, kept the same as
// the source by this test (-update rewrites it).
func TestOptionsDocListsEveryField(t *testing.T) {
	const file = "options.go"
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	text := string(data)
	start := strings.Index(text, "//\ttype Options struct {\n")
	end := strings.Index(text, "\n//\t}\n")
	if start < 0 || end < start {
		t.Fatalf("%s has no block from \"//\\ttype Options struct {\" to \"//\\t}\"", file)
	}
	end += len("\n//\t}\n")
	want := asComment(optionsSource(t))
	if text[start:end] != want {
		if *update {
			if err := os.WriteFile(file, []byte(text[:start]+want+text[end:]), 0o644); err != nil {
				t.Fatal(err)
			}
			return
		}
		t.Fatalf("%s's copy of the Options declaration differs from package wiring's; run: go test -run TestOptionsDocListsEveryField -update .", file)
	}

	// What go doc prints: every field, by name, in the root package's
	// documentation of Options.
	fset := token.NewFileSet()
	names, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	var files []*ast.File
	for _, name := range names {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.ParseComments)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	p, err := doc.NewFromFiles(fset, files, "github.com/ratekeeper/ratekeeper")
	if err != nil {
		t.Fatal(err)
	}
	var comment string
	for _, ty := range p.Types {
		if ty.Name == "Options" {
			comment = ty.Doc
		}
	}
	rt := reflect.TypeFor[ratekeeper.Options]()
	for i := range rt.NumField() {
		f := rt.Field(i)
		if !f.IsExported() {
			continue
		}
		if !strings.Contains(comment, "\t"+f.Name+" ") && !strings.Contains(comment, ", "+f.Name+" ") && !strings.Contains(comment, "\t"+f.Name+",") {
			t.Errorf("go doc ratekeeper Options does not show the field %s", f.Name)
		}
	}
}
