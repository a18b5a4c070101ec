// Command zero-fields writes engine/src/omitted/table.rs: for each built-in kind the rules
// select (apps/v1 Deployment, StatefulSet, DaemonSet; argoproj.io/v1alpha1 Rollout), which
// fields the API server leaves out when they hold their zero value (reference §4).
//
// The API server serialises objects with encoding/json over the Go types of k8s.io/api
// (a custom resource such as a Rollout is stored as sent, but its controller writes it back
// through its own Go types). A non-pointer bool, number or string tagged `omitempty` (or
// `omitzero`) is then absent when it is false, 0 or "": `paused: false` in a manifest is stored
// as no `paused` at all. A pointer (`automountServiceAccountToken *bool`) is kept whatever it
// holds, since its absence means something else (a default, often true); so are map values
// and list elements. Neither k8s-openapi nor the OpenAPI schemas the API server publishes
// can tell the two apart, so the Go types are read here, by reflection, following
// encoding/json's own rules (inlined embedded structs, `-`, custom marshalers).
//
//	go run ./tools/zero-fields                  # rewrites ../../engine/src/omitted/table.rs
//	go run ./tools/zero-fields -check           # exit 1 when the committed table is stale
//
// Some of those zeros are not stored as nothing but replaced by kube-apiserver's defaulting
// (`imagePullPolicy: ""` is stored as IfNotPresent, a probe's `timeoutSeconds: 0` as 1): the
// table marks them `defaulted`, found by running that defaulting (k8s.io/kubernetes, the code
// kube-apiserver runs for apps/v1) on each kind's object. A custom resource (the Rollout) gets
// none.
//
// Only fields that are such zeros, or lead to one, are written; a field the table does not
// name keeps every value. `status` is left out: it is never compared (reference §3 step 6).
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"runtime/debug"
	"sort"
	"strings"
	"unicode"

	rollouts "github.com/argoproj/argo-rollouts/pkg/apis/rollouts/v1alpha1"
	appsv1 "k8s.io/api/apps/v1"
	appsdefaults "k8s.io/kubernetes/pkg/apis/apps/v1"
)

// kind is one root of the table: what the rules select, the Go type the server writes, and the
// defaulting kube-apiserver runs on it (none for a custom resource: it is stored as sent).
type kind struct {
	group, kind string
	goType      reflect.Type
	defaults    func(any)
}

var kinds = []kind{
	{"apps", "DaemonSet", reflect.TypeOf(appsv1.DaemonSet{}),
		func(o any) { appsdefaults.SetObjectDefaults_DaemonSet(o.(*appsv1.DaemonSet)) }},
	{"apps", "Deployment", reflect.TypeOf(appsv1.Deployment{}),
		func(o any) { appsdefaults.SetObjectDefaults_Deployment(o.(*appsv1.Deployment)) }},
	{"apps", "StatefulSet", reflect.TypeOf(appsv1.StatefulSet{}),
		func(o any) { appsdefaults.SetObjectDefaults_StatefulSet(o.(*appsv1.StatefulSet)) }},
	{"argoproj.io", "Rollout", reflect.TypeOf(rollouts.Rollout{}), nil},
}

// The modules whose types the table is read from; their versions head the table.
var sourceModules = []string{"k8s.io/api", "k8s.io/apimachinery", "k8s.io/kubernetes", "github.com/argoproj/argo-rollouts"}

// nesting is how a field holds a struct the table describes.
type nesting int

const (
	noNesting nesting = iota
	nestedObject
	listOf
	mapOf
)

// field is one JSON field of a struct, as encoding/json writes it.
type field struct {
	name    string
	zero    string // "Bool", "Number", "String": the zero that is omitted; "" when none is
	nesting nesting
	nested  reflect.Type // the struct below, for nestedObject, listOf and mapOf
	// Whether encoding/json writes the field when the struct is its zero value.
	writtenAtZero bool
	// Whether kube-apiserver's defaulting replaces the field's zero with a value.
	defaulted bool
}

var marshaler = reflect.TypeOf((*json.Marshaler)(nil)).Elem()

func main() {
	check := flag.Bool("check", false, "compare with the committed table instead of writing it; exit 1 when it differs")
	out := flag.String("out", filepath.Join("..", "..", "engine", "src", "omitted", "table.rs"), "the table to write (or check)")
	flag.Parse()

	text, err := generate()
	if err != nil {
		fmt.Fprintln(os.Stderr, "zero-fields:", err)
		os.Exit(2)
	}
	if *check {
		committed, err := os.ReadFile(*out)
		if err != nil {
			fmt.Fprintln(os.Stderr, "zero-fields:", err)
			os.Exit(2)
		}
		if !bytes.Equal(committed, text) {
			fmt.Fprintf(os.Stderr, "zero-fields: %s is stale: run `go run .` in tools/zero-fields and commit the result\n", *out)
			os.Exit(1)
		}
		return
	}
	if err := os.WriteFile(*out, text, 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "zero-fields:", err)
		os.Exit(2)
	}
}

// generate reads every kind's type and renders the table.
func generate() ([]byte, error) {
	g := &generator{fields: map[reflect.Type][]field{}, defaulted: defaultedFields()}
	for _, k := range kinds {
		if err := g.visit(k.goType); err != nil {
			return nil, fmt.Errorf("%s %s: %w", k.group, k.kind, err)
		}
	}
	g.prune()
	return g.render(), nil
}

type generator struct {
	// The JSON fields of every struct reached, in encoding/json's order.
	fields map[reflect.Type][]field
	// The structs that hold an omitted zero, or lead to one.
	matters map[reflect.Type]bool
	// The fields whose zero kube-apiserver's defaulting replaces, by struct and JSON name.
	defaulted map[reflect.Type]map[string]bool
}

// visit reads a struct and every struct below it once.
func (g *generator) visit(t reflect.Type) error {
	if _, seen := g.fields[t]; seen {
		return nil
	}
	g.fields[t] = nil // cycles end here
	fields, err := jsonFields(t, isKind(t))
	if err != nil {
		return fmt.Errorf("%s: %w", t, err)
	}
	for i := range fields {
		if g.defaulted[t][fields[i].name] {
			if fields[i].zero == "" {
				return fmt.Errorf("%s.%s: its zero is defaulted but not left out: not modelled", t, fields[i].name)
			}
			fields[i].defaulted = true
		}
	}
	g.fields[t] = fields
	for _, f := range fields {
		if f.nested != nil {
			if err := g.visit(f.nested); err != nil {
				return err
			}
		}
	}
	return nil
}

// isKind says whether t is one of the kinds' own types, whose `status` is left out.
func isKind(t reflect.Type) bool {
	for _, k := range kinds {
		if k.goType == t {
			return true
		}
	}
	return false
}

// jsonFields lists a struct's fields as encoding/json writes them: embedded structs without a
// JSON name are inlined, `-` and unexported fields are left out.
func jsonFields(t reflect.Type, root bool) ([]field, error) {
	var out []field
	for i := 0; i < t.NumField(); i++ {
		sf := t.Field(i)
		tag := sf.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, options, _ := strings.Cut(tag, ",")
		ft := sf.Type
		pointer := ft.Kind() == reflect.Pointer
		if pointer {
			ft = ft.Elem()
		}
		if sf.Anonymous && name == "" && ft.Kind() == reflect.Struct {
			inner, err := jsonFields(ft, false)
			if err != nil {
				return nil, err
			}
			out = append(out, inner...)
			continue
		}
		if !sf.IsExported() {
			continue
		}
		if name == "" {
			name = sf.Name
		}
		if root && name == "status" {
			continue
		}
		f := field{name: name}
		omitempty := hasOption(options, "omitempty")
		omitzero := hasOption(options, "omitzero")
		if !pointer && (omitempty || omitzero) {
			zero, err := omittedZero(ft, omitzero)
			if err != nil {
				return nil, fmt.Errorf("field %s: %w", sf.Name, err)
			}
			f.zero = zero
		}
		f.nesting, f.nested = nestingOf(ft)
		// At zero, omitempty leaves out everything but a non-pointer struct; omitzero leaves
		// out everything.
		f.writtenAtZero = !omitzero && (!omitempty || (!pointer && ft.Kind() == reflect.Struct))
		out = append(out, f)
	}
	return out, nil
}

func hasOption(options, want string) bool {
	for _, o := range strings.Split(options, ",") {
		if o == want {
			return true
		}
	}
	return false
}

// omittedZero is the JSON type of the zero that encoding/json leaves out for a non-pointer
// field of type t, or "" when what it leaves out is already absent to reference §4 (an empty
// list or map, a struct whose zero encodes as null or {}).
func omittedZero(t reflect.Type, omitzero bool) (string, error) {
	switch t.Kind() {
	case reflect.Bool:
		return "Bool", nil
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64,
		reflect.Float32, reflect.Float64:
		return "Number", nil
	case reflect.String:
		return "String", nil
	case reflect.Slice, reflect.Map:
		return "", nil // [] and {}: absent already
	case reflect.Struct:
		if !omitzero {
			return "", nil // omitempty never leaves a struct out
		}
		text, err := json.Marshal(reflect.Zero(t).Interface())
		if err != nil {
			return "", err
		}
		if absent(text) {
			return "", nil
		}
		return "", fmt.Errorf("omitzero on %s, whose zero encodes as %s: not modelled", t, text)
	default:
		return "", fmt.Errorf("omitempty on a %s: not modelled", t.Kind())
	}
}

// absent is reference §4's absence of a JSON text: null, [], or a map of absent entries.
func absent(text []byte) bool {
	var v any
	if json.Unmarshal(text, &v) != nil {
		return false
	}
	var walk func(any) bool
	walk = func(v any) bool {
		switch v := v.(type) {
		case nil:
			return true
		case []any:
			return len(v) == 0
		case map[string]any:
			for _, e := range v {
				if !walk(e) {
					return false
				}
			}
			return true
		}
		return false
	}
	return walk(v)
}

// nestingOf says how a field of type t holds a struct whose fields encoding/json writes: not
// one whose own marshaler writes something else (a Quantity, a Time, an IntOrString are
// scalars in JSON).
func nestingOf(t reflect.Type) (nesting, reflect.Type) {
	structOf := func(t reflect.Type) reflect.Type {
		if t.Kind() == reflect.Pointer {
			t = t.Elem()
		}
		if t.Kind() != reflect.Struct || !writesOwnFields(t) {
			return nil
		}
		return t
	}
	switch t.Kind() {
	case reflect.Struct:
		if s := structOf(t); s != nil {
			return nestedObject, s
		}
	case reflect.Slice:
		if s := structOf(t.Elem()); s != nil {
			return listOf, s
		}
	case reflect.Map:
		if s := structOf(t.Elem()); s != nil {
			return mapOf, s
		}
	}
	return noNesting, nil
}

// writesOwnFields says whether the JSON of a struct type is its own fields: it has no
// marshaler, or one that writes them as encoding/json would (Argo Rollouts' RolloutSpec
// marshals an alias of itself). A marshaler counts as that when the zero value's JSON is an
// object with exactly the fields encoding/json writes at zero.
func writesOwnFields(t reflect.Type) bool {
	if !t.Implements(marshaler) && !reflect.PointerTo(t).Implements(marshaler) {
		return true
	}
	text, err := json.Marshal(reflect.New(t).Interface())
	if err != nil {
		panic(fmt.Sprintf("%s: marshalling its zero value: %v", t, err))
	}
	var written map[string]json.RawMessage
	if json.Unmarshal(text, &written) != nil {
		return false // a scalar in JSON
	}
	fields, err := jsonFields(t, false)
	if err != nil {
		panic(fmt.Sprintf("%s: %v", t, err))
	}
	expected := map[string]bool{}
	for _, f := range fields {
		if f.writtenAtZero {
			expected[f.name] = true
		}
	}
	if len(expected) != len(written) {
		return false
	}
	for name := range written {
		if !expected[name] {
			return false
		}
	}
	return true
}

// defaultedFields runs kube-apiserver's own defaulting (k8s.io/kubernetes, what it runs on
// apps/v1 objects) on each kind's object with every struct allocated, every list of structs
// given one element and every scalar at its zero, and lists the scalars it changes: a declared
// zero of such a field is not what the API server stores (imagePullPolicy "" is stored as
// IfNotPresent). Defaults that depend on another field's non-zero value are not seen.
func defaultedFields() map[reflect.Type]map[string]bool {
	found := map[reflect.Type]map[string]bool{}
	for _, k := range kinds {
		if k.defaults == nil {
			continue
		}
		// Two objects filled alike: one defaulted, one to compare it with (defaulting writes
		// through the pointers a shallow copy would share).
		object, untouched := reflect.New(k.goType), reflect.New(k.goType)
		fill(object.Elem(), map[reflect.Type]bool{})
		fill(untouched.Elem(), map[reflect.Type]bool{})
		k.defaults(object.Interface())
		changedScalars(untouched.Elem(), object.Elem(), k.goType, found)
	}
	return found
}

// fill allocates every pointer to a struct and gives every list of structs one element,
// recursively (a type already on the way is left empty).
func fill(v reflect.Value, onPath map[reflect.Type]bool) {
	switch v.Kind() {
	case reflect.Pointer:
		if v.Type().Elem().Kind() == reflect.Struct && !onPath[v.Type().Elem()] {
			v.Set(reflect.New(v.Type().Elem()))
			fill(v.Elem(), onPath)
		}
	case reflect.Struct:
		if onPath[v.Type()] {
			return
		}
		onPath[v.Type()] = true
		for i := 0; i < v.NumField(); i++ {
			if v.Type().Field(i).IsExported() {
				fill(v.Field(i), onPath)
			}
		}
		delete(onPath, v.Type())
	case reflect.Slice:
		element := v.Type().Elem()
		if element.Kind() == reflect.Struct || (element.Kind() == reflect.Pointer && element.Elem().Kind() == reflect.Struct) {
			items := reflect.MakeSlice(v.Type(), 1, 1)
			fill(items.Index(0), onPath)
			v.Set(items)
		}
	}
}

// changedScalars records the scalar fields that are zero in before and not in after, by the
// struct whose JSON fields they are (an inlined embedded struct's fields are its owner's).
func changedScalars(before, after reflect.Value, owner reflect.Type, found map[reflect.Type]map[string]bool) {
	switch before.Kind() {
	case reflect.Pointer:
		if !before.IsNil() && !after.IsNil() {
			changedScalars(before.Elem(), after.Elem(), before.Elem().Type(), found)
		}
	case reflect.Slice:
		for i := 0; i < before.Len() && i < after.Len(); i++ {
			changedScalars(before.Index(i), after.Index(i), before.Type().Elem(), found)
		}
	case reflect.Struct:
		t := before.Type()
		for i := 0; i < t.NumField(); i++ {
			sf := t.Field(i)
			name, _, _ := strings.Cut(sf.Tag.Get("json"), ",")
			if sf.Anonymous && name == "" && sf.Type.Kind() == reflect.Struct {
				changedScalars(before.Field(i), after.Field(i), owner, found)
				continue
			}
			if !sf.IsExported() || name == "-" {
				continue
			}
			if name == "" {
				name = sf.Name
			}
			b, a := before.Field(i), after.Field(i)
			switch b.Kind() {
			case reflect.Bool, reflect.String, reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
				reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Float32, reflect.Float64:
				if b.IsZero() && !a.IsZero() {
					if found[owner] == nil {
						found[owner] = map[string]bool{}
					}
					found[owner][name] = true
				}
			case reflect.Struct:
				changedScalars(b, a, b.Type(), found)
			default:
				changedScalars(b, a, owner, found)
			}
		}
	}
}

// prune keeps the structs that hold an omitted zero or lead to one (a fixpoint: types may
// refer to each other).
func (g *generator) prune() {
	g.matters = map[reflect.Type]bool{}
	for changed := true; changed; {
		changed = false
		for t, fields := range g.fields {
			if g.matters[t] {
				continue
			}
			for _, f := range fields {
				if f.zero != "" || (f.nested != nil && g.matters[f.nested]) {
					g.matters[t] = true
					changed = true
					break
				}
			}
		}
	}
}

// kept is what the table says of a field: nothing when it is no omitted zero and leads to none.
func (g *generator) kept(f field) (field, bool) {
	if f.nested != nil && !g.matters[f.nested] {
		f.nesting, f.nested = noNesting, nil
	}
	return f, f.zero != "" || f.nested != nil
}

func (g *generator) render() []byte {
	var b bytes.Buffer
	fmt.Fprintln(&b, "//! The fields of the built-in kinds that the API server leaves out when they hold their zero")
	fmt.Fprintln(&b, "//! value (see [`super`]).")
	fmt.Fprintln(&b, "//!")
	fmt.Fprintln(&b, "//! @generated by tools/zero-fields (`go run .` there); do not edit. Read by reflection from")
	fmt.Fprintf(&b, "//! the Go types of %s.\n", moduleVersions())
	fmt.Fprintln(&b)
	fmt.Fprintln(&b, "use super::{Field, Kind, Nested, Object, Zero};")
	fmt.Fprintln(&b)
	fmt.Fprintln(&b, "/// The kinds: their fields, and whether kube-apiserver's defaulting runs on them.")
	fmt.Fprintln(&b, "pub(super) static KINDS: &[Kind] = &[")
	for _, k := range kinds {
		fmt.Fprintf(&b, "    Kind { group: %q, kind: %q, object: &%s, defaulted: %t },\n", k.group, k.kind, staticName(k.goType), k.defaults != nil)
	}
	fmt.Fprintln(&b, "];")

	var types []reflect.Type
	for t := range g.matters {
		types = append(types, t)
	}
	sort.Slice(types, func(i, j int) bool { return staticName(types[i]) < staticName(types[j]) })
	for i := 1; i < len(types); i++ {
		if staticName(types[i]) == staticName(types[i-1]) {
			panic(fmt.Sprintf("two types named %s: %s and %s", staticName(types[i]), types[i-1].PkgPath(), types[i].PkgPath()))
		}
	}
	for _, t := range types {
		var fields []field
		for _, f := range g.fields[t] {
			if f, ok := g.kept(f); ok {
				fields = append(fields, f)
			}
		}
		// Byte order of the names: the engine looks fields up by binary search.
		sort.Slice(fields, func(i, j int) bool { return fields[i].name < fields[j].name })
		fmt.Fprintln(&b)
		fmt.Fprintf(&b, "/// `%s.%s`.\n", t.PkgPath(), t.Name())
		fmt.Fprintf(&b, "static %s: Object = Object { fields: &[\n", staticName(t))
		for _, f := range fields {
			zero := "None"
			if f.zero != "" {
				zero = "Some(Zero::" + f.zero + ")"
			}
			nested := "Nested::No"
			switch f.nesting {
			case nestedObject:
				nested = "Nested::Object(&" + staticName(f.nested) + ")"
			case listOf:
				nested = "Nested::ListOf(&" + staticName(f.nested) + ")"
			case mapOf:
				nested = "Nested::MapOf(&" + staticName(f.nested) + ")"
			}
			fmt.Fprintf(&b, "    Field { name: %q, zero: %s, defaulted: %t, nested: %s },\n", f.name, zero, f.defaulted, nested)
		}
		fmt.Fprintln(&b, "] };")
	}
	return b.Bytes()
}

// staticName is the Rust static of a Go type: its package's last two path elements and its
// name, in upper snake case (`CORE_V1_CONTAINER`, `ROLLOUTS_V1ALPHA1_ROLLOUT_SPEC`).
func staticName(t reflect.Type) string {
	parts := strings.Split(t.PkgPath(), "/")
	if len(parts) > 2 {
		parts = parts[len(parts)-2:]
	}
	var b strings.Builder
	for _, p := range parts {
		b.WriteString(strings.ToUpper(strings.NewReplacer(".", "_", "-", "_").Replace(p)))
		b.WriteByte('_')
	}
	name := []rune(t.Name())
	for i, r := range name {
		if i > 0 && unicode.IsUpper(r) && (unicode.IsLower(name[i-1]) || (i+1 < len(name) && unicode.IsLower(name[i+1]))) {
			b.WriteByte('_')
		}
		b.WriteRune(unicode.ToUpper(r))
	}
	return b.String()
}

// moduleVersions names the modules the types come from, with the versions built in.
func moduleVersions() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		panic("no build information: build with module support")
	}
	versions := map[string]string{}
	for _, dep := range info.Deps {
		versions[dep.Path] = dep.Version
	}
	var names []string
	for _, m := range sourceModules {
		names = append(names, m+" "+versions[m])
	}
	return strings.Join(names, ", ")
}
