package ratekeeper_test

import (
	"bufio"
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"unicode"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/ratekeeper/ratekeeper/cmd/ratekeeper/cli"
	"github.com/ratekeeper/ratekeeper/gateway"
	"github.com/ratekeeper/ratekeeper/provider"
	"github.com/ratekeeper/ratekeeper/sim"
	"github.com/ratekeeper/ratekeeper/store/storetest"
)

// The documents keep honest by these tests: every command line they show
// parses with the commands' current flags, every flag they name exists,
// every link between them resolves, and docs/configuration.md lists every
// flag, config key and environment variable the code has.

var update = flag.Bool("update", false, "rewrite the generated part of docs/configuration.md")

// docFiles are the documents whose command lines and links are checked.
func docFiles(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob("docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	files = append([]string{"README.md", "BENCHMARKS.md"}, files...)
	if len(files) < 5 {
		t.Fatalf("found only %v", files)
	}
	return files
}

// A codeBlock is a fenced block of a document: its language and its lines,
// numbered as in the file.
type codeBlock struct {
	lang  string
	lines []numberedLine
}

type numberedLine struct {
	n    int
	text string
}

// splitMarkdown returns a document's fenced code blocks and its prose lines
// (the lines outside them).
func splitMarkdown(text string) (blocks []codeBlock, prose []numberedLine) {
	var cur *codeBlock
	var fence string
	for i, line := range strings.Split(text, "\n") {
		trimmed := strings.TrimSpace(line)
		if cur == nil {
			if strings.HasPrefix(trimmed, "```") {
				fence = "```"
				cur = &codeBlock{lang: strings.TrimSpace(strings.TrimPrefix(trimmed, "```"))}
				continue
			}
			prose = append(prose, numberedLine{i + 1, line})
			continue
		}
		if strings.HasPrefix(trimmed, fence) && strings.TrimSpace(strings.TrimPrefix(trimmed, fence)) == "" {
			blocks = append(blocks, *cur)
			cur = nil
			continue
		}
		cur.lines = append(cur.lines, numberedLine{i + 1, line})
	}
	return blocks, prose
}

// shellBlock says whether a fenced block holds shell command lines: an
// unlabelled block or a shell language; text blocks hold output and
// synopses.
func shellBlock(lang string) bool {
	switch lang {
	case "", "sh", "bash", "shell", "console":
		return true
	}
	return false
}

// shellToken is a word (quotes removed) or an operator of a shell line.
type shellToken struct {
	word string
	op   string
}

// shellTokens splits a shell line into words and operators, as far as the
// documents need: quotes, backslashes, comments, | || & && ; ( ) $( < >.
func shellTokens(line string) []shellToken {
	var toks []shellToken
	var word strings.Builder
	inWord := false
	flush := func() {
		if inWord {
			toks = append(toks, shellToken{word: word.String()})
			word.Reset()
			inWord = false
		}
	}
	rs := []rune(line)
	for i := 0; i < len(rs); i++ {
		r := rs[i]
		switch {
		case r == '\\' && i+1 < len(rs):
			i++
			word.WriteRune(rs[i])
			inWord = true
		case r == '\'':
			j := i + 1
			for j < len(rs) && rs[j] != '\'' {
				j++
			}
			word.WriteString(string(rs[i+1 : min(j, len(rs))]))
			inWord = true
			i = j
		case r == '"':
			j := i + 1
			for j < len(rs) && rs[j] != '"' {
				if rs[j] == '\\' && j+1 < len(rs) {
					j++
				}
				j++
			}
			word.WriteString(strings.ReplaceAll(string(rs[i+1:min(j, len(rs))]), `\"`, `"`))
			inWord = true
			i = j
		case r == '#' && !inWord:
			flush()
			return toks
		case unicode.IsSpace(r):
			flush()
		case r == '$' && i+1 < len(rs) && rs[i+1] == '(':
			flush()
			toks = append(toks, shellToken{op: "$("})
			i++
		case strings.ContainsRune("|&;()<>", r):
			flush()
			op := string(r)
			if i+1 < len(rs) && (rs[i+1] == r && r != '(' && r != ')' || r == '>' && rs[i+1] == '&') {
				op += string(rs[i+1])
				i++
			}
			toks = append(toks, shellToken{op: op})
		default:
			word.WriteRune(r)
			inWord = true
		}
	}
	flush()
	return toks
}

var envAssignment = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*=`)

// ratekeeperInvocations returns the arguments of every ratekeeper command
// on a shell line: `ratekeeper ARGS` or `go run ./cmd/ratekeeper ARGS`,
// after environment assignments, `time`, `sudo` or a `$ ` prompt, in any
// part of a pipeline, list or command substitution.
func ratekeeperInvocations(line string) [][]string {
	var simple [][]string
	var cur []string
	skipNext := false
	for _, tok := range shellTokens(line) {
		if tok.op != "" {
			if strings.ContainsAny(tok.op, "<>") && !strings.Contains(tok.op, "&") {
				skipNext = true // a redirection's file
				continue
			}
			if strings.Contains(tok.op, ">&") {
				continue
			}
			simple = append(simple, cur)
			cur = nil
			continue
		}
		if skipNext {
			skipNext = false
			continue
		}
		cur = append(cur, tok.word)
	}
	simple = append(simple, cur)

	var out [][]string
	for _, words := range simple {
		for len(words) > 0 && (envAssignment.MatchString(words[0]) || words[0] == "time" || words[0] == "$" || words[0] == "sudo") {
			words = words[1:]
		}
		switch {
		case len(words) >= 1 && words[0] == "ratekeeper":
			out = append(out, words[1:])
		case len(words) >= 3 && words[0] == "go" && words[1] == "run" && strings.TrimSuffix(words[2], "/") == "./cmd/ratekeeper":
			out = append(out, words[3:])
		}
	}
	return out
}

// parseCommandLine finds the command args name and parses its flags and
// arguments as the command would, without running it.
func parseCommandLine(args []string) error {
	root := cli.NewRoot()
	cmd, rest, err := root.Find(args)
	if err != nil {
		return err
	}
	if cmd == root {
		return fmt.Errorf("no command given")
	}
	if err := cmd.ParseFlags(rest); err != nil {
		return fmt.Errorf("%s: %w", cmd.CommandPath(), err)
	}
	if err := cmd.ValidateArgs(cmd.Flags().Args()); err != nil {
		return fmt.Errorf("%s: %w", cmd.CommandPath(), err)
	}
	if !cmd.Runnable() {
		return fmt.Errorf("%s is not a command that runs (a subcommand is missing)", cmd.CommandPath())
	}
	return nil
}

// shellLines joins a block's continued lines (ending in a backslash).
func shellLines(lines []numberedLine) []numberedLine {
	var out []numberedLine
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		text := l.text
		for strings.HasSuffix(strings.TrimRight(text, " "), `\`) && i+1 < len(lines) {
			i++
			text = strings.TrimSuffix(strings.TrimRight(text, " "), `\`) + " " + lines[i].text
		}
		out = append(out, numberedLine{l.n, text})
	}
	return out
}

// TestDocsCommandLinesParse: every ratekeeper command line the documents
// show in a shell block parses with the commands' current flags.
func TestDocsCommandLinesParse(t *testing.T) {
	seen := 0
	for _, file := range docFiles(t) {
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		blocks, _ := splitMarkdown(string(data))
		for _, b := range blocks {
			if !shellBlock(b.lang) {
				continue
			}
			for _, l := range shellLines(b.lines) {
				for _, args := range ratekeeperInvocations(l.text) {
					seen++
					if err := parseCommandLine(args); err != nil {
						t.Errorf("%s:%d: %q does not parse: %v", file, l.n, "ratekeeper "+strings.Join(args, " "), err)
					}
				}
			}
		}
	}
	if seen < 40 {
		t.Errorf("only %d ratekeeper command lines found in the documents; the extraction is broken", seen)
	}
	t.Logf("%d ratekeeper command lines parsed", seen)
}

// allFlags returns every flag name of every command, with the commands
// that have it.
func allFlags() map[string][]string {
	flags := map[string][]string{"help": {"every command"}}
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		c.LocalFlags().VisitAll(func(f *pflag.Flag) {
			flags[f.Name] = append(flags[f.Name], c.CommandPath())
		})
		for _, s := range c.Commands() {
			walk(s)
		}
	}
	walk(cli.NewRoot())
	return flags
}

var inlineCode = regexp.MustCompile("`([^`]+)`")

// TestDocsNameOnlyExistingFlags: a flag named in the prose (`--max-wait`,
// `--provider NAME=URL`) is a flag of some command.
func TestDocsNameOnlyExistingFlags(t *testing.T) {
	flags := allFlags()
	flagName := regexp.MustCompile(`^--([a-z][a-z0-9-]*)`)
	for _, file := range docFiles(t) {
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		_, prose := splitMarkdown(string(data))
		for _, l := range prose {
			for _, m := range inlineCode.FindAllStringSubmatch(l.text, -1) {
				f := flagName.FindStringSubmatch(m[1])
				if f == nil {
					continue
				}
				if _, ok := flags[f[1]]; !ok {
					t.Errorf("%s:%d: `%s` names --%s, which no ratekeeper command has", file, l.n, m[1], f[1])
				}
			}
		}
	}
}

func TestShellLineExtraction(t *testing.T) {
	for _, c := range []struct {
		line string
		want [][]string
	}{
		{`ratekeeper fetch -i urls.txt -o out.jsonl # a comment`, [][]string{{"fetch", "-i", "urls.txt", "-o", "out.jsonl"}}},
		{`GITHUB_TOKEN=a,b ratekeeper get 'https://x/y?a=1&b=2' -o f.json`, [][]string{{"get", "https://x/y?a=1&b=2", "-o", "f.json"}}},
		{`id=$(ratekeeper tasks submit -t http -i '{"url":"u"}')`, [][]string{{"tasks", "submit", "-t", "http", "-i", `{"url":"u"}`}}},
		{`cat u.txt | ratekeeper fetch -i - > r.jsonl`, [][]string{{"fetch", "-i", "-"}}},
		{`curl -si https://h/rate_limit | ratekeeper explain`, [][]string{{"explain"}}},
		{`ratekeeper sim --tokens 2 & sleep 1; go run ./cmd/ratekeeper demo`, [][]string{{"sim", "--tokens", "2"}, {"demo"}}},
		{`echo "ratekeeper is not run here"`, nil},
	} {
		if got := ratekeeperInvocations(c.line); !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s\n got %q\nwant %q", c.line, got, c.want)
		}
	}
	if err := parseCommandLine([]string{"fetch", "--no-such-flag"}); err == nil {
		t.Error("an unknown flag parsed")
	}
	if err := parseCommandLine([]string{"nosuchcommand"}); err == nil {
		t.Error("an unknown command parsed")
	}
	if err := parseCommandLine([]string{"tasks", "get"}); err == nil {
		t.Error("tasks get without its ID parsed")
	}
	if err := parseCommandLine([]string{"fetch", "--concurrency", "many"}); err == nil {
		t.Error("a bad flag value parsed")
	}
}

// githubSlug is the anchor GitHub gives a heading.
func githubSlug(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(heading)) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// anchors returns the anchors of a document's headings.
func anchors(text string) map[string]bool {
	_, prose := splitMarkdown(text)
	out := map[string]bool{}
	count := map[string]int{}
	for _, l := range prose {
		if !strings.HasPrefix(l.text, "#") {
			continue
		}
		h := strings.TrimLeft(l.text, "#")
		if !strings.HasPrefix(h, " ") {
			continue
		}
		h = strings.NewReplacer("`", "", "*", "").Replace(h)
		s := githubSlug(h)
		if n := count[s]; n > 0 {
			count[s]++
			s = fmt.Sprintf("%s-%d", s, n)
		} else {
			count[s] = 1
		}
		out[s] = true
	}
	return out
}

var mdLink = regexp.MustCompile(`!?\[[^\]]*\]\(([^)\s]+)\)`)

// TestDocsLinksResolve: every relative link of the documents names a file
// that exists and, for a document, an anchor one of its headings has.
func TestDocsLinksResolve(t *testing.T) {
	checked := 0
	for _, file := range docFiles(t) {
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		_, prose := splitMarkdown(string(data))
		for _, l := range prose {
			text := inlineCode.ReplaceAllString(l.text, "")
			for _, m := range mdLink.FindAllStringSubmatch(text, -1) {
				target := m[1]
				if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				checked++
				path, anchor, _ := strings.Cut(target, "#")
				dest := file
				if path != "" {
					dest = filepath.Join(filepath.Dir(file), path)
					if _, err := os.Stat(dest); err != nil {
						t.Errorf("%s:%d: link %s: %v", file, l.n, target, err)
						continue
					}
				}
				if anchor == "" {
					continue
				}
				if !strings.HasSuffix(dest, ".md") {
					t.Errorf("%s:%d: link %s: an anchor into a file that is not markdown", file, l.n, target)
					continue
				}
				destText, err := os.ReadFile(dest)
				if err != nil {
					t.Fatal(err)
				}
				if !anchors(string(destText))[anchor] {
					t.Errorf("%s:%d: link %s: %s has no heading with anchor #%s", file, l.n, target, dest, anchor)
				}
			}
		}
	}
	if checked < 30 {
		t.Errorf("only %d relative links found; the extraction is broken", checked)
	}
	t.Logf("%d relative links resolved", checked)
}

func TestGitHubSlug(t *testing.T) {
	for in, want := range map[string]string{
		"The command given to --exec":         "the-command-given-to---exec",
		"Looking and trying: status, explain": "looking-and-trying-status-explain",
		"ratekeeper tasks submit":             "ratekeeper-tasks-submit",
		"A fleet on one database":             "a-fleet-on-one-database",
	} {
		if got := githubSlug(in); got != want {
			t.Errorf("githubSlug(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestDocSizes keeps the documents a reader meets first short.
func TestDocSizes(t *testing.T) {
	for file, limit := range map[string]int64{
		"README.md":            12 * 1024,
		"docs/architecture.md": 30 * 1024,
		"BENCHMARKS.md":        20 * 1024,
	} {
		st, err := os.Stat(file)
		if err != nil {
			t.Fatal(err)
		}
		if st.Size() > limit {
			t.Errorf("%s is %d bytes, over its %d: move details to a page of docs/", file, st.Size(), limit)
		}
	}
}

const (
	flagsStart = "<!-- flags:start -->"
	flagsEnd   = "<!-- flags:end -->"
)

// flagRow is one flag of one command.
type flagRow struct {
	name, shorthand, def, usage string
}

func (r flagRow) key() string {
	return r.name + "\x00" + r.shorthand + "\x00" + r.def + "\x00" + r.usage
}

func rowsOf(c *cobra.Command) []flagRow {
	var rows []flagRow
	c.LocalFlags().VisitAll(func(f *pflag.Flag) {
		if f.Hidden {
			return
		}
		def := f.DefValue
		if def == "[]" {
			def = ""
		}
		rows = append(rows, flagRow{f.Name, f.Shorthand, def, f.Usage})
	})
	return rows
}

func cell(s string) string { return strings.ReplaceAll(s, "|", `\|`) }

func flagCell(r flagRow) string {
	if r.shorthand != "" {
		return fmt.Sprintf("`-%s`, `--%s`", r.shorthand, r.name)
	}
	return "`--" + r.name + "`"
}

func defCell(r flagRow) string {
	if r.def == "" {
		return ""
	}
	return "`" + r.def + "`"
}

// flagReference is the generated part of docs/configuration.md: the flags
// several commands share (the same name, default and meaning), once, then
// each command's own.
func flagReference() string {
	var cmds []*cobra.Command
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if c.Hidden || c.Name() == "help" {
			return
		}
		if c.HasParent() {
			cmds = append(cmds, c)
		}
		for _, s := range c.Commands() {
			walk(s)
		}
	}
	walk(cli.NewRoot())
	short := func(c *cobra.Command) string { return strings.TrimPrefix(c.CommandPath(), "ratekeeper ") }

	users := map[string][]string{}
	rowOf := map[string]flagRow{}
	for _, c := range cmds {
		for _, r := range rowsOf(c) {
			users[r.key()] = append(users[r.key()], short(c))
			rowOf[r.key()] = r
		}
	}
	var shared []string
	for k, us := range users {
		if len(us) > 1 {
			shared = append(shared, k)
		}
	}
	sort.Slice(shared, func(i, j int) bool {
		a, b := rowOf[shared[i]], rowOf[shared[j]]
		if a.name != b.name {
			return a.name < b.name
		}
		return shared[i] < shared[j]
	})

	var b strings.Builder
	b.WriteString("### Flags several commands share\n\n")
	b.WriteString("| flag | default | environment | commands | what it does |\n|---|---|---|---|---|\n")
	for _, k := range shared {
		r := rowOf[k]
		fmt.Fprintf(&b, "| %s | %s | `%s` | %s | %s |\n", flagCell(r), defCell(r), cli.EnvName(r.name), strings.Join(users[k], ", "), cell(r.usage))
	}
	for _, c := range cmds {
		fmt.Fprintf(&b, "\n### %s\n\n%s.\n\n```text\n%s\n```\n\n", c.CommandPath(), strings.TrimSuffix(c.Short, "."), c.UseLine())
		var own, fromShared []string
		var rows strings.Builder
		for _, r := range rowsOf(c) {
			if len(users[r.key()]) > 1 {
				fromShared = append(fromShared, "`--"+r.name+"`")
				continue
			}
			own = append(own, r.name)
			fmt.Fprintf(&rows, "| %s | %s | `%s` | %s |\n", flagCell(r), defCell(r), cli.EnvName(r.name), cell(r.usage))
		}
		if len(own) > 0 {
			b.WriteString("| flag | default | environment | what it does |\n|---|---|---|---|\n")
			b.WriteString(rows.String())
		}
		if len(own) > 0 && len(fromShared) > 0 {
			b.WriteString("\n")
		}
		if len(fromShared) > 0 {
			fmt.Fprintf(&b, "And the shared %s.\n", strings.Join(fromShared, ", "))
		}
		var inherited []string
		c.InheritedFlags().VisitAll(func(f *pflag.Flag) { inherited = append(inherited, "`--"+f.Name+"`") })
		switch {
		case len(inherited) > 0:
			if len(own)+len(fromShared) > 0 {
				b.WriteString("\n")
			}
			fmt.Fprintf(&b, "%s of `%s` applies too.\n", strings.Join(inherited, ", "), c.Parent().CommandPath())
		case len(own)+len(fromShared) == 0:
			b.WriteString("No flags.\n")
		}
		if c.HasSubCommands() && c.PersistentFlags().HasFlags() {
			var names []string
			c.PersistentFlags().VisitAll(func(f *pflag.Flag) { names = append(names, "`--"+f.Name+"`") })
			fmt.Fprintf(&b, "\nIts %s applies to every `%s` subcommand.\n", strings.Join(names, ", "), c.CommandPath())
		}
	}
	return b.String()
}

// TestConfigurationReference: the flag tables of docs/configuration.md are
// what the commands have. `go test -run TestConfigurationReference -update .`
// rewrites them.
func TestConfigurationReference(t *testing.T) {
	const file = "docs/configuration.md"
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	text := string(data)
	before, rest, ok1 := strings.Cut(text, flagsStart+"\n")
	_, after, ok2 := strings.Cut(rest, flagsEnd)
	if !ok1 || !ok2 {
		t.Fatalf("%s: markers %s and %s not found", file, flagsStart, flagsEnd)
	}
	want := flagReference()
	got := strings.TrimSuffix(rest[:len(rest)-len(after)-len(flagsEnd)], "\n")
	if got == strings.TrimSuffix(want, "\n") {
		return
	}
	if *update {
		if err := os.WriteFile(file, []byte(before+flagsStart+"\n"+want+flagsEnd+after), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	gl, wl := strings.Split(got, "\n"), strings.Split(strings.TrimSuffix(want, "\n"), "\n")
	for i := range max(len(gl), len(wl)) {
		g, w := "", ""
		if i < len(gl) {
			g = gl[i]
		}
		if i < len(wl) {
			w = wl[i]
		}
		if g != w {
			t.Fatalf("%s's flag reference differs from the commands at its line %d:\n doc: %s\ncode: %s\nrun: go test -run TestConfigurationReference -update .", file, i+1, g, w)
		}
	}
}

// documentedKeys returns the first column's `keys` of the table that
// follows heading in a document.
func documentedKeys(t *testing.T, text, heading string) []string {
	t.Helper()
	_, section, ok := strings.Cut(text, "\n"+heading+"\n")
	if !ok {
		t.Fatalf("heading %q not found", heading)
	}
	var keys []string
	sc := bufio.NewScanner(strings.NewReader(section))
	inTable := false
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") {
			break
		}
		if !strings.HasPrefix(line, "| `") {
			if inTable && !strings.HasPrefix(line, "|") {
				break
			}
			continue
		}
		inTable = true
		first, _, _ := strings.Cut(strings.TrimPrefix(line, "| "), " |")
		for _, m := range inlineCode.FindAllStringSubmatch(first, -1) {
			keys = append(keys, m[1])
		}
	}
	return keys
}

// providerConfigKeys are the keys provider.ParseConfig knows, as its own
// refusals of an unknown key list them.
func providerConfigKeys(t *testing.T) []string {
	t.Helper()
	var keys []string
	_, err := provider.ParseConfig([]byte("[providers.x]\nnot_a_key = 1\n"), "x.toml")
	if err == nil {
		t.Fatal("an unknown provider key was accepted")
	}
	_, list, ok := strings.Cut(err.Error(), "known keys: ")
	if !ok {
		t.Fatalf("the refusal of an unknown key no longer lists the known ones: %v", err)
	}
	for k := range strings.SplitSeq(list, ", ") {
		if k != "app" {
			keys = append(keys, k)
		}
	}
	_, err = provider.ParseConfig([]byte("[providers.x]\napp = 1\n"), "x.toml")
	_, list, ok = strings.Cut(fmt.Sprint(err), "expected a table with ")
	if !ok {
		t.Fatalf("the refusal of a bad app table no longer lists its keys: %v", err)
	}
	list, _, _ = strings.Cut(list, ", got")
	for _, k := range strings.FieldsFunc(list, func(r rune) bool { return r == ',' || r == ' ' }) {
		if k != "and" {
			keys = append(keys, k)
		}
	}
	_, err = provider.ParseConfig([]byte("not_a_key = 1\n"), "x.toml")
	_, list, ok = strings.Cut(fmt.Sprint(err), "the file has one key, ")
	if !ok {
		t.Fatalf("the refusal of an unknown top-level key no longer names the one: %v", err)
	}
	top, _, _ := strings.Cut(list, ",")
	return append(keys, top)
}

// simConfigKeys are the file keys of sim.Config, by their toml tags,
// nested keys as apis.tokens.owner.
func simConfigKeys() []string {
	var keys []string
	var walk func(t reflect.Type, prefix string)
	walk = func(t reflect.Type, prefix string) {
		for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice || t.Kind() == reflect.Map {
			t = t.Elem()
		}
		if t.Kind() != reflect.Struct || t.PkgPath() != reflect.TypeFor[sim.Config]().PkgPath() {
			return
		}
		for i := range t.NumField() {
			f := t.Field(i)
			tag, _, _ := strings.Cut(f.Tag.Get("toml"), ",")
			if tag == "" || tag == "-" {
				continue
			}
			keys = append(keys, prefix+tag)
			if tag == "resources" {
				continue // documented as one row: its fields repeat the API's own
			}
			walk(f.Type, prefix+tag+".")
		}
	}
	walk(reflect.TypeFor[sim.Config](), "")
	return keys
}

func sameKeys(t *testing.T, what string, code, doc []string) {
	t.Helper()
	for _, k := range code {
		if !slices.Contains(doc, k) {
			t.Errorf("docs/configuration.md, %s: the code has %q, the table does not", what, k)
		}
	}
	for _, k := range doc {
		if !slices.Contains(code, k) {
			t.Errorf("docs/configuration.md, %s: the table has %q, the code does not", what, k)
		}
	}
}

// TestConfigurationKeysAndVariables: docs/configuration.md's tables of
// config file keys, simulator keys and environment variables hold what the
// code reads, and nothing else.
func TestConfigurationKeysAndVariables(t *testing.T) {
	data, err := os.ReadFile("docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	text := string(data)
	sameKeys(t, "Config file keys", providerConfigKeys(t), documentedKeys(t, text, "## Config file keys"))
	sameKeys(t, "The simulator's config file", simConfigKeys(), documentedKeys(t, text, "## The simulator's config file"))

	vars := documentedKeys(t, text, "## Environment variables")
	read := []string{gateway.KeysEnv, storetest.PostgresEnv, cli.EnvName("<FLAG>")}
	// The built-in kinds' token variables (provider.FixedTokenEnv would
	// include the toy API this package's tests register).
	for _, kind := range []provider.Kind{provider.GitHub, provider.GitLab, provider.HuggingFace, provider.Gitea} {
		p, err := provider.New(string(kind), kind, "https://api.example.com/")
		if err != nil {
			t.Fatal(err)
		}
		read = append(read, p.TokenEnv...)
	}
	for _, v := range read {
		if !slices.Contains(vars, v) {
			t.Errorf("docs/configuration.md, Environment variables: %s, which the code reads, is not in the table", v)
		}
	}
}

// TestDocsExplainOutput: the explanation README.md and docs/tools.md show
// is what `ratekeeper explain` prints for the repository's sample answer.
func TestDocsExplainOutput(t *testing.T) {
	in, err := os.Open("testdata/responses/github-primary-exceeded.http")
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	var stdout, stderr strings.Builder
	if code := cli.Execute([]string{"explain"}, in, &stdout, &stderr); code != 0 {
		t.Fatalf("explain exited %d: %s", code, stderr.String())
	}
	first, _, _ := strings.Cut(stdout.String(), "\n")
	for _, file := range []string{"README.md", "docs/tools.md"} {
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(data), "ratekeeper explain < testdata/responses/github-primary-exceeded.http") ||
			!strings.Contains(string(data), "\n"+first+"\n") {
			t.Errorf("%s does not show explain's output for the sample answer:\n%s", file, stdout.String())
		}
	}
}

// TestReadmeTestCommandIsCI: the test command the README gives is the one
// CI runs first (.ci/run), so that a contributor who runs it sees what CI
// sees, timeout included. (CI's later go test lines run more of the fleet
// simulation's schedules.)
func TestReadmeTestCommandIsCI(t *testing.T) {
	ci, err := os.ReadFile(".ci/run")
	if err != nil {
		t.Fatal(err)
	}
	var command string
	for line := range strings.Lines(string(ci)) {
		if strings.HasPrefix(strings.TrimSpace(line), "go test ") {
			command = strings.TrimSpace(line)
			break
		}
	}
	if command == "" {
		t.Fatal(".ci/run runs no go test command")
	}
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks, _ := splitMarkdown(string(readme))
	for _, b := range blocks {
		for _, l := range b.lines {
			if strings.HasPrefix(strings.TrimSpace(l.text), "go test ") {
				if got := strings.TrimSpace(strings.SplitN(l.text, "#", 2)[0]); got != command {
					t.Errorf("README.md:%d runs %q; .ci/run runs %q", l.n, got, command)
				}
				return
			}
		}
	}
	t.Errorf("README.md shows no go test command; .ci/run runs %q", command)
}

// TestDocsEventKinds: docs/client.md's table of events has a row for every
// EventKind the transport declares, and no row for one it does not.
func TestDocsEventKinds(t *testing.T) {
	fset := token.NewFileSet()
	names, err := filepath.Glob("transport/*.go")
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]string{} // value → constant
	for _, name := range names {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			g, ok := d.(*ast.GenDecl)
			if !ok || g.Tok != token.CONST {
				continue
			}
			for _, spec := range g.Specs {
				vs := spec.(*ast.ValueSpec)
				if id, ok := vs.Type.(*ast.Ident); !ok || id.Name != "EventKind" {
					continue
				}
				for i, n := range vs.Names {
					if lit, ok := vs.Values[i].(*ast.BasicLit); ok {
						v, _ := strconv.Unquote(lit.Value)
						kinds[v] = n.Name
					}
				}
			}
		}
	}
	if len(kinds) < 6 {
		t.Fatalf("found only %d event kinds in transport: %v", len(kinds), kinds)
	}
	data, err := os.ReadFile("docs/client.md")
	if err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile("(?m)^\\| `([a-z_]+)` \\(`transport\\.(Event[A-Za-z]+)`\\) \\|")
	documented := map[string]string{}
	for _, m := range row.FindAllStringSubmatch(string(data), -1) {
		documented[m[1]] = m[2]
	}
	for v, name := range kinds {
		if documented[v] != name {
			t.Errorf("docs/client.md's table of events has no row \"| `%s` (`transport.%s`) |\"", v, name)
		}
	}
	for v, name := range documented {
		if kinds[v] == "" {
			t.Errorf("docs/client.md documents event %s (%s), which transport does not declare", v, name)
		}
	}
}

// nameCommand checks what a document names inline, such as `ratekeeper
// status --live` or the synopsis `ratekeeper get URL [-o FILE]`: the
// command exists, and so does every flag written with it. Arguments are
// not checked: inline text names commands, with placeholders.
func nameCommand(args []string) error {
	root := cli.NewRoot()
	cmd, rest, err := root.Find(args)
	if err != nil {
		return err
	}
	for _, w := range rest {
		w = strings.Trim(w, "[]")
		if !strings.HasPrefix(w, "-") || w == "-" || w == "--" {
			continue
		}
		name, _, _ := strings.Cut(strings.TrimLeft(w, "-"), "=")
		var f *pflag.Flag
		if strings.HasPrefix(w, "--") {
			f = cmd.Flags().Lookup(name)
			if f == nil {
				f = cmd.InheritedFlags().Lookup(name)
			}
		} else if len(name) == 1 {
			f = cmd.Flags().ShorthandLookup(name)
			if f == nil {
				f = cmd.InheritedFlags().ShorthandLookup(name)
			}
		}
		if f == nil {
			return fmt.Errorf("%s has no flag %s", cmd.CommandPath(), w)
		}
	}
	return nil
}

// TestDocsInlineCommandsParse: every ratekeeper command a document names
// inline, in its prose or tables (`ratekeeper status --live`), exists with
// the flags written with it, as the shell blocks' lines do.
func TestDocsInlineCommandsParse(t *testing.T) {
	seen := 0
	for _, file := range docFiles(t) {
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		_, prose := splitMarkdown(string(data))
		for _, l := range prose {
			for _, m := range inlineCode.FindAllStringSubmatch(l.text, -1) {
				for _, args := range ratekeeperInvocations(m[1]) {
					seen++
					if err := nameCommand(args); err != nil {
						t.Errorf("%s:%d: `%s`: %v", file, l.n, m[1], err)
					}
				}
			}
		}
	}
	if seen < 20 {
		t.Errorf("only %d inline ratekeeper command lines found; the extraction is broken", seen)
	}
	t.Logf("%d inline ratekeeper command lines checked", seen)
}

func TestNameCommand(t *testing.T) {
	for _, ok := range [][]string{{"status", "--live"}, {"tasks"}, {"get", "URL", "[-o", "FILE]", "[--paginate]"}, {"config", "check", "FILE"}, {"--version"}, {"fetch", "-v"}} {
		if err := nameCommand(ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for _, bad := range [][]string{{"nosuch"}, {"status", "--no-such-flag"}, {"get", "[-Z]"}, {"config", "check", "--db", "x"}} {
		if err := nameCommand(bad); err == nil {
			t.Errorf("%q passed", bad)
		}
	}
}
