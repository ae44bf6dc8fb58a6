// Command enums prints the enum values that the Kubernetes API's generated
// OpenAPI definitions carry (k8s.io/kubernetes/pkg/generated/openapi) and the
// published api/openapi-spec/v3 files leave out, as JSON:
// {"<model name>": {"<property>": ["value", ...]}}.
// Run by gen-schemas; built through the Go module proxy.
package main

import (
	"encoding/json"
	"os"

	"k8s.io/kube-openapi/pkg/common"
	"k8s.io/kube-openapi/pkg/validation/spec"
	"k8s.io/kubernetes/pkg/generated/openapi"
)

func main() {
	ref := func(path string) spec.Ref { return spec.MustCreateRef("#/" + path) }
	out := map[string]map[string][]interface{}{}
	var defs map[string]common.OpenAPIDefinition = openapi.GetOpenAPIDefinitions(ref)
	for name, def := range defs {
		for prop, schema := range def.Schema.Properties {
			enum := schema.Enum
			if len(enum) == 0 && schema.Items != nil && schema.Items.Schema != nil {
				// A list of enum values: "items[]" holds them.
				if len(schema.Items.Schema.Enum) > 0 {
					if out[name] == nil {
						out[name] = map[string][]interface{}{}
					}
					out[name][prop+"[]"] = schema.Items.Schema.Enum
				}
				continue
			}
			if len(enum) > 0 {
				if out[name] == nil {
					out[name] = map[string][]interface{}{}
				}
				out[name][prop] = enum
			}
		}
	}
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", " ")
	if err := enc.Encode(out); err != nil {
		os.Exit(1)
	}
}
