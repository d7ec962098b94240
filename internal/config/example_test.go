package config

import (
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// TestExampleCoversTypes checks configs/pepd.yaml against the sections'
// types (issue 28): every key the types declare (yaml tags, each section's
// in its component's package) is in the example, and every key in the
// example is declared. A new key in a component's section therefore
// fails this test until the example documents it.
func TestExampleCoversTypes(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", "configs", "pepd.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err != nil {
		t.Fatal(err)
	}
	inExample := map[string]bool{}
	exampleKeys(root.Content[0], "", inExample)
	inTypes := map[string]bool{}
	typeKeys(reflect.TypeOf(Config{}), "", inTypes)
	if len(inTypes) < 90 {
		t.Fatalf("only %d keys found in the types: the walk is broken", len(inTypes))
	}
	var missing, unknown []string
	for k := range inTypes {
		if !inExample[k] {
			missing = append(missing, k)
		}
	}
	for k := range inExample {
		if !inTypes[k] {
			unknown = append(unknown, k)
		}
	}
	slices.Sort(missing)
	slices.Sort(unknown)
	if len(missing) > 0 {
		t.Errorf("keys of the types not in configs/pepd.yaml: %s", strings.Join(missing, ", "))
	}
	if len(unknown) > 0 {
		t.Errorf("keys in configs/pepd.yaml that no type declares: %s", strings.Join(unknown, ", "))
	}
}

// exampleKeys adds the dotted path of every mapping key under n.
func exampleKeys(n *yaml.Node, prefix string, out map[string]bool) {
	if n.Kind != yaml.MappingNode {
		return
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k := prefix + n.Content[i].Value
		out[k] = true
		exampleKeys(n.Content[i+1], k+".", out)
	}
}

// typeKeys adds the dotted path of every yaml-tagged field of the struct
// t, descending into fields that are structs with yaml-tagged fields of
// their own (sections); other types (netip.Addr, time.Duration, slices)
// are values.
func typeKeys(t reflect.Type, prefix string, out map[string]bool) {
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		name := strings.Split(f.Tag.Get("yaml"), ",")[0]
		if !f.IsExported() || name == "" || name == "-" {
			continue
		}
		out[prefix+name] = true
		if f.Type.Kind() == reflect.Struct && hasYAMLFields(f.Type) {
			typeKeys(f.Type, prefix+name+".", out)
		}
	}
}

func hasYAMLFields(t reflect.Type) bool {
	for i := 0; i < t.NumField(); i++ {
		if t.Field(i).Tag.Get("yaml") != "" {
			return true
		}
	}
	return false
}
