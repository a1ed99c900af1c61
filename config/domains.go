package config

import (
	"errors"
	"fmt"
	"os"
	"strconv"

	"github.com/tickflow/tickflow/internal/streams"
)

// validateDomains checks each domain is one subject token and none
// repeats; required also demands at least one.
func validateDomains(field string, domains []string, required bool) error {
	if required && len(domains) == 0 {
		return invalid(field, "must list at least one domain")
	}
	var errs []error
	first := make(map[string]int, len(domains))
	for i, d := range domains {
		f := fmt.Sprintf("%s[%d]", field, i)
		if err := streams.ValidateDomain(d); err != nil {
			errs = append(errs, because(f, err))
			continue
		}
		if j, dup := first[d]; dup {
			errs = append(errs, invalid(f, "%q repeats %s[%d]", d, field, j))
			continue
		}
		first[d] = i
	}
	return errors.Join(errs...)
}

// instanceName is the default name of a processor or worker: the host and
// process, so two replicas on one machine differ.
func instanceName() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "tickflow"
	}
	return host + "-" + strconv.Itoa(os.Getpid())
}
