package config

import (
	"strings"

	"github.com/pelletier/go-toml/v2/unstable"
)

// keyLines maps each dotted key in a (valid) document to the line it is
// set on, so errors found after decoding can still name the line. Table
// headers map to their own line too ("timing").
func keyLines(doc []byte) map[string]int {
	lines := map[string]int{}
	p := unstable.Parser{}
	p.Reset(doc)
	var table []string
	for p.NextExpression() {
		e := p.Expression()
		switch e.Kind {
		case unstable.Table:
			table = keyParts(e.Key())
			lines[strings.Join(table, ".")] = line(&p, e)
		case unstable.KeyValue:
			key := append(append([]string(nil), table...), keyParts(e.Key())...)
			lines[strings.Join(key, ".")] = line(&p, e)
		}
	}
	return lines
}

func keyParts(it unstable.Iterator) []string {
	var parts []string
	for it.Next() {
		parts = append(parts, string(it.Node().Data))
	}
	return parts
}

// line is the 1-based line of a node's first key part.
func line(p *unstable.Parser, n *unstable.Node) int {
	it := n.Key()
	if !it.Next() {
		return 0
	}
	return p.Shape(p.Range(it.Node().Data)).Start.Line
}
