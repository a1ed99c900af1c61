package config_test

import (
	"flag"
	"fmt"

	"github.com/tickflow/tickflow/config"
)

// A command's main builds its config from defaults, file, environment and
// flags in one call. Here the environment is a map so the example is
// self-contained; main passes os.Getenv.
func ExampleParse() {
	env := map[string]string{
		"TICKFLOW_CONFIG":                "../tickflow.example.yaml",
		"TICKFLOW_PROCESSOR_CONCURRENCY": "16",
		"NATS_URL":                       "nats://10.0.0.5:4222",
	}
	fs := flag.NewFlagSet("processor", flag.ContinueOnError)
	cfg := config.DefaultProcessor()
	err := config.Parse(fs, []string{"-domain", "payments", "-max-steps", "64"}, &cfg, func(k string) string { return env[k] })
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(cfg.Domains, cfg.Concurrency, cfg.MaxSteps, cfg.WorkTimeout, cfg.NATS.URL)
	// Output: [payments] 16 64 10s nats://10.0.0.5:4222
}

// Validation names the field as written in the file and the rule it broke.
func ExampleProcessor_Validate() {
	cfg := config.DefaultProcessor()
	cfg.Domains = []string{"payments", "a.b"}
	cfg.Concurrency = 0
	fmt.Println(cfg.Validate())
	// Output:
	// config: processor.domains[1]: "a.b" must not contain '.', '*', '>', spaces or control characters (found "." at 1)
	// config: processor.concurrency: must be ≥ 1 (got 0)
}
