package config

import (
	"reflect"
	"strings"
)

// RestartTag is the struct tag a section's field carries when a new value
// takes effect only at the next start (`reload:"restart"`): SIGHUP keeps
// the running value and pepd logs the change (Restarts). A section owns
// this like its defaults: the tag is on the field, in its component.
const RestartTag = "reload"

// Change is a setting that differs between two configurations: its
// dotted YAML key ("http.max_conns", or "listen" for a whole section) and
// both values.
type Change struct {
	Key      string
	Old, New any
}

// Restarts returns the settings tagged `reload:"restart"` whose values
// differ between old (the running configuration) and new, in the order
// of the types' fields.
func Restarts(old, new *Config) []Change {
	var out []Change
	restarts(reflect.ValueOf(*old), reflect.ValueOf(*new), "", &out)
	return out
}

func restarts(a, b reflect.Value, prefix string, out *[]Change) {
	t := a.Type()
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		name := strings.Split(f.Tag.Get("yaml"), ",")[0]
		if !f.IsExported() || name == "" || name == "-" {
			continue
		}
		key := prefix + name
		switch {
		case f.Tag.Get(RestartTag) == "restart":
			if !reflect.DeepEqual(a.Field(i).Interface(), b.Field(i).Interface()) {
				*out = append(*out, Change{Key: key, Old: a.Field(i).Interface(), New: b.Field(i).Interface()})
			}
		case f.Type.Kind() == reflect.Struct:
			restarts(a.Field(i), b.Field(i), key+".", out)
		}
	}
}
