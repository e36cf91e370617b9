package ratekeeper

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/ratekeeper/ratekeeper"

// layerRow matches a row of docs/architecture.md's package table:
// | `name` (note) | layer | owns | must not |
var layerRow = regexp.MustCompile("^\\| `([^`]+)`[^|]*\\| (\\d+) \\|")

// readLayers reads the package table of a document: import path
// (relative to the module; "ratekeeper" is the root) → layer.
func readLayers(t *testing.T, file string) map[string]int {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	layers := map[string]int{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		m := layerRow.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		n, _ := strconv.Atoi(m[2])
		name := m[1]
		if name == "ratekeeper" {
			name = ""
		}
		if _, dup := layers[name]; dup {
			t.Errorf("%s: package %q has two rows", file, m[1])
		}
		layers[name] = n
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(layers) == 0 {
		t.Fatalf("%s: no package table found", file)
	}
	return layers
}

// goListDeps returns each package of the module with the module's packages
// it depends on, directly or not (go list's Deps, which leaves tests out).
func goListDeps(t *testing.T) map[string][]string {
	t.Helper()
	out, err := exec.Command("go", "list", "-f", "{{.ImportPath}}{{range .Deps}} {{.}}{{end}}", "./...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	rel := func(p string) (string, bool) {
		if p == module {
			return "", true
		}
		r, ok := strings.CutPrefix(p, module+"/")
		return r, ok
	}
	deps := map[string][]string{}
	for line := range strings.Lines(string(out)) {
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		pkg, _ := rel(fields[0])
		deps[pkg] = []string{}
		for _, d := range fields[1:] {
			if r, ok := rel(d); ok {
				deps[pkg] = append(deps[pkg], r)
			}
		}
	}
	return deps
}

// violations lists what breaks the layering: a package without a row, a
// row without a package, a package reaching its own layer or above, and a
// package of the top internal/ above layer 0 (it holds only leaves: the
// commands live in cmd/ratekeeper, the wiring in wiring).
func violations(layers map[string]int, deps map[string][]string) []string {
	name := func(p string) string {
		if p == "" {
			return "ratekeeper (root)"
		}
		return p
	}
	var v []string
	for pkg, ds := range deps {
		l, ok := layers[pkg]
		if !ok {
			v = append(v, "package "+name(pkg)+" has no row in docs/architecture.md's package table")
			continue
		}
		if strings.HasPrefix(pkg, "internal/") && l != 0 {
			v = append(v, fmt.Sprintf("%s is at layer %d: internal/ holds only leaves (layer 0)", pkg, l))
		}
		for _, d := range ds {
			if dl, ok := layers[d]; ok && dl >= l {
				v = append(v, fmt.Sprintf("%s (layer %d) reaches %s (layer %d): a package may only import lower layers", name(pkg), l, name(d), dl))
			}
		}
	}
	for pkg := range layers {
		if _, ok := deps[pkg]; !ok {
			v = append(v, "docs/architecture.md lists "+name(pkg)+", which go list does not know")
		}
	}
	slices.Sort(v)
	return v
}

// TestArchitecture holds the packages to docs/architecture.md's table.
func TestArchitecture(t *testing.T) {
	layers := readLayers(t, "docs/architecture.md")
	for _, v := range violations(layers, goListDeps(t)) {
		t.Error(v)
	}
}

// TestArchitectureViolations checks the check on a made-up module.
func TestArchitectureViolations(t *testing.T) {
	if m := layerRow.FindStringSubmatch("| `ratekeeper` (root) | 6 | the façade | — |"); m == nil || m[1] != "ratekeeper" || m[2] != "6" {
		t.Fatalf("the root's row was not read: %q", m)
	}
	layers := map[string]int{"headers": 0, "sim": 0, "transport": 2, "": 6, "gone": 1, "internal/wiring": 3, "store/internal/core": 0}
	deps := map[string][]string{
		"headers":             {},
		"sim":                 {"headers"},   // same layer: refused
		"transport":           {"headers"},   // lower: fine
		"":                    {"transport"}, // lower: fine
		"new":                 {},            // no row
		"internal/wiring":     {"transport"}, // not a leaf in internal/: refused
		"store/internal/core": {},            // a store's own internal/: fine
	}
	got := violations(layers, deps)
	want := []string{
		"docs/architecture.md lists gone, which go list does not know",
		"internal/wiring is at layer 3: internal/ holds only leaves (layer 0)",
		"package new has no row in docs/architecture.md's package table",
		"sim (layer 0) reaches headers (layer 0): a package may only import lower layers",
	}
	if !slices.Equal(got, want) {
		t.Errorf("violations:\n got %q\nwant %q", got, want)
	}
}
