package sim

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"time"

	"github.com/BurntSushi/toml"
)

// LoadConfig reads and validates a config file: TOML when its name ends in
// .toml, JSON when it ends in .json, otherwise JSON if its first non-space
// byte is '{' and TOML if not. Durations are strings like "1h" or "90s".
// Every error names the file and the field.
func LoadConfig(path string) (Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Config{}, fmt.Errorf("sim config: %w", err)
	}
	format := "toml"
	switch strings.ToLower(filepath.Ext(path)) {
	case ".json":
		format = "json"
	case ".toml":
	default:
		if t := bytes.TrimSpace(data); len(t) > 0 && t[0] == '{' {
			format = "json"
		}
	}
	cfg, err := ParseConfig(data, format)
	if err != nil {
		return Config{}, fmt.Errorf("sim config %s: %w", path, errors.Unwrap(err))
	}
	return cfg, nil
}

// ParseConfig parses and validates a config in format "toml" or "json".
func ParseConfig(data []byte, format string) (Config, error) {
	var cfg Config
	var err error
	switch format {
	case "toml":
		cfg, err = parseTOML(data)
	case "json":
		cfg, err = parseJSON(data)
	default:
		err = fmt.Errorf("unknown config format %q (want toml or json)", format)
	}
	if err == nil {
		err = cfg.Validate()
	}
	if err != nil {
		return Config{}, fmt.Errorf("sim config: %w", err)
	}
	return cfg, nil
}

func parseTOML(data []byte) (Config, error) {
	var cfg Config
	md, err := toml.NewDecoder(bytes.NewReader(data)).Decode(&cfg)
	if err != nil {
		var pe toml.ParseError
		if errors.As(err, &pe) {
			return Config{}, fmt.Errorf("malformed TOML at line %d: %s", pe.Position.Line, pe.Message)
		}
		return Config{}, fmt.Errorf("malformed TOML: %v", err)
	}
	if und := md.Undecoded(); len(und) > 0 {
		var errs []error
		for _, k := range und {
			errs = append(errs, fmt.Errorf("%s: unknown field (check its spelling against the documented keys)", k.String()))
		}
		return Config{}, errors.Join(errs...)
	}
	return cfg, nil
}

// parseJSON decodes JSON through a generic tree first, checked against the
// Config type, so every error names its field with indexes
// ("apis[1].tokens[0].owner") and durations can be written as strings.
func parseJSON(data []byte) (Config, error) {
	var tree any
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	if err := dec.Decode(&tree); err != nil {
		var se *json.SyntaxError
		if errors.As(err, &se) {
			line := 1 + bytes.Count(data[:min(int(se.Offset), len(data))], []byte("\n"))
			return Config{}, fmt.Errorf("malformed JSON at line %d: %v", line, err)
		}
		return Config{}, fmt.Errorf("malformed JSON: %v", err)
	}
	if dec.More() {
		return Config{}, errors.New("malformed JSON: more than one value in the file")
	}
	norm, err := normalizeJSON(tree, reflect.TypeFor[Config](), "")
	if err != nil {
		return Config{}, err
	}
	b, err := json.Marshal(norm)
	if err != nil {
		return Config{}, fmt.Errorf("malformed JSON: %v", err)
	}
	var cfg Config
	if err := json.Unmarshal(b, &cfg); err != nil {
		return Config{}, fmt.Errorf("malformed JSON: %v", err)
	}
	return cfg, nil
}

var durationType = reflect.TypeFor[time.Duration]()

// normalizeJSON checks v against type t and converts duration strings to
// nanoseconds.
func normalizeJSON(v any, t reflect.Type, path string) (any, error) {
	name := path
	if name == "" {
		name = "the top level"
	}
	if v == nil {
		return nil, nil
	}
	if t == durationType {
		return normalizeDuration(v, name)
	}
	switch t.Kind() {
	case reflect.Pointer:
		return normalizeJSON(v, t.Elem(), path)
	case reflect.Struct:
		return normalizeStruct(v, t, path, name)
	case reflect.Slice:
		return normalizeSlice(v, t, path, name)
	case reflect.Map:
		return normalizeMap(v, t, path, name)
	}
	if err := checkScalar(v, t.Kind(), name); err != nil {
		return nil, err
	}
	return v, nil
}

// normalizeDuration reads a duration string ("90s") as nanoseconds, what
// time.Duration's JSON form is.
func normalizeDuration(v any, name string) (any, error) {
	s, ok := v.(string)
	if !ok {
		return nil, fmt.Errorf("%s: want a duration string like \"1h\", \"5m\" or \"90s\"", name)
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return nil, fmt.Errorf("%s: %q is not a duration (want e.g. \"1h\", \"5m\", \"90s\")", name, s)
	}
	return int64(d), nil
}

// normalizeStruct checks an object against struct t's json fields. Every
// unknown field and every bad value is reported, in key order, so one run
// shows all of a file's mistakes.
func normalizeStruct(v any, t reflect.Type, path, name string) (any, error) {
	m, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("%s: want an object", name)
	}
	fields := map[string]reflect.StructField{}
	for i := range t.NumField() {
		f := t.Field(i)
		if tag, _, _ := strings.Cut(f.Tag.Get("json"), ","); tag != "" && tag != "-" {
			fields[tag] = f
		}
	}
	out := map[string]any{}
	var errs []error
	for _, k := range sortedKeys(m) {
		f, ok := fields[k]
		if !ok {
			errs = append(errs, fmt.Errorf("%s: unknown field (known: %s)", join(path, k), strings.Join(sortedKeys(fields), ", ")))
			continue
		}
		nv, err := normalizeJSON(m[k], f.Type, join(path, k))
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out[k] = nv
	}
	return out, errors.Join(errs...)
}

// normalizeSlice checks each element of an array against t's element
// type.
func normalizeSlice(v any, t reflect.Type, path, name string) (any, error) {
	l, ok := v.([]any)
	if !ok {
		return nil, fmt.Errorf("%s: want an array", name)
	}
	out := make([]any, len(l))
	var errs []error
	for i, e := range l {
		nv, err := normalizeJSON(e, t.Elem(), fmt.Sprintf("%s[%d]", path, i))
		errs = append(errs, err)
		out[i] = nv
	}
	return out, errors.Join(errs...)
}

// normalizeMap checks each value of an object against t's element type,
// in key order so the errors come in a stable order.
func normalizeMap(v any, t reflect.Type, path, name string) (any, error) {
	m, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("%s: want an object", name)
	}
	out := map[string]any{}
	var errs []error
	for _, k := range sortedKeys(m) {
		nv, err := normalizeJSON(m[k], t.Elem(), join(path, k))
		errs = append(errs, err)
		out[k] = nv
	}
	return out, errors.Join(errs...)
}

// checkScalar checks that v, as decoded with UseNumber, fits a value of
// kind k; other kinds pass unchecked.
func checkScalar(v any, k reflect.Kind, name string) error {
	switch k {
	case reflect.String:
		if _, ok := v.(string); !ok {
			return fmt.Errorf("%s: want a string", name)
		}
	case reflect.Bool:
		if _, ok := v.(bool); !ok {
			return fmt.Errorf("%s: want true or false", name)
		}
	case reflect.Int, reflect.Int64, reflect.Int32:
		n, ok := v.(json.Number)
		if !ok {
			return fmt.Errorf("%s: want a whole number", name)
		}
		if _, err := n.Int64(); err != nil {
			return fmt.Errorf("%s: %s is not a whole number", name, n)
		}
	case reflect.Float64:
		n, ok := v.(json.Number)
		if !ok {
			return fmt.Errorf("%s: want a number", name)
		}
		if _, err := n.Float64(); err != nil {
			return fmt.Errorf("%s: %s is not a number", name, n)
		}
	}
	return nil
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}
