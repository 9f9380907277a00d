package config

import (
	"fmt"
	"regexp"
	"strings"

	"go.yaml.in/yaml/v3"
)

// envRE matches an environment reference ${NAME}, or its escape $${NAME}.
var envRE = regexp.MustCompile(`\$?\$\{([A-Za-z_][A-Za-z0-9_]*)\}`)

// expandEnv replaces every ${NAME} in the string values of the tree under n
// (mapping values and sequence items; never keys) with the value of the
// environment variable NAME, as lookup reports it; $${NAME} stands for the
// text ${NAME}. This is how a deployment passes what must not be written in
// the file (passwords from a Kubernetes Secret, kafka.instance_id from the
// pod's name). A variable that is not set is a problem on the value's line
// (set but empty is the empty string). Only string values are expanded: a
// number or a boolean is written as such in the file. It reports whether a
// value changed.
func expandEnv(n *yaml.Node, lookup func(string) (string, bool), p *Problems) bool {
	changed := false
	switch n.Kind {
	case yaml.DocumentNode, yaml.SequenceNode:
		for _, c := range n.Content {
			changed = expandEnv(c, lookup, p) || changed
		}
	case yaml.MappingNode:
		for i := 1; i < len(n.Content); i += 2 {
			changed = expandEnv(n.Content[i], lookup, p) || changed
		}
	case yaml.ScalarNode:
		if n.Tag != "!!str" || !strings.Contains(n.Value, "${") {
			return false
		}
		n.Value = envRE.ReplaceAllStringFunc(n.Value, func(ref string) string {
			if strings.HasPrefix(ref, "$$") {
				return ref[1:]
			}
			name := ref[2 : len(ref)-1]
			v, ok := lookup(name)
			if !ok {
				p.Items = append(p.Items, Problem{Line: n.Line, Msg: fmt.Sprintf("%s: environment variable %s is not set", ref, name)})
			}
			return v
		})
		return true
	}
	return changed
}
