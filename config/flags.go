package config

import (
	"flag"
	"strings"
)

// listValue is a flag.Value over a []string given as a comma-separated
// list. Each use replaces the list, so "-domain a,b" is the whole list and
// String round-trips through Set, which Parse relies on.
type listValue struct{ p *[]string }

var _ flag.Value = listValue{}

func (l listValue) String() string {
	if l.p == nil {
		return ""
	}
	return strings.Join(*l.p, ",")
}

func (l listValue) Set(s string) error {
	*l.p = splitList(s)
	return nil
}

// domainsFlag registers -domain on fs, writing into p.
func domainsFlag(fs *flag.FlagSet, p *[]string, usage string) {
	fs.Var(listValue{p}, "domain", usage+", comma-separated")
}
