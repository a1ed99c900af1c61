package pipeline_test

import (
	"errors"
	"testing"
	"time"

	"github.com/tickflow/tickflow/pipeline"
)

func TestInclusionValidate(t *testing.T) {
	inc := func(poll, wait time.Duration) *pipeline.Inclusion {
		return &pipeline.Inclusion{PollEvery: pipeline.Duration(poll), MaxWait: pipeline.Duration(wait)}
	}
	for _, tt := range []struct {
		name  string
		mode  pipeline.Mode
		f     pipeline.Function
		field string
	}{
		{name: "polled", mode: pipeline.NonAtomic, f: pipeline.Function{Type: "tx", Sender: true, Inclusion: inc(time.Second, time.Minute)}},
		{name: "confirmed only", mode: pipeline.NonAtomic, f: pipeline.Function{Type: "tx", Inclusion: inc(0, time.Minute)}},
		{name: "no max wait", mode: pipeline.NonAtomic, f: pipeline.Function{Type: "tx", Inclusion: inc(time.Second, 0)}, field: "functions[0].inclusion.max_wait"},
		{name: "negative poll", mode: pipeline.NonAtomic, f: pipeline.Function{Type: "tx", Inclusion: inc(-1, time.Minute)}, field: "functions[0].inclusion.poll_every"},
		{name: "atomic", mode: pipeline.Atomic, f: pipeline.Function{Type: "tx", Inclusion: inc(0, time.Minute)}, field: "functions[0].inclusion"},
		{name: "with confirm", mode: pipeline.NonAtomic, f: pipeline.Function{Type: "tx", Inclusion: inc(0, time.Minute),
			Confirm: &pipeline.Confirmation{Expect: "x", Timeout: pipeline.Duration(time.Minute)}}, field: "functions[0].inclusion"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			b := pipeline.Batch{Domain: "chain", Priority: pipeline.Med, Subroutine: pipeline.Subroutine{Mode: tt.mode}, Functions: []pipeline.Function{tt.f}}
			err := b.Validate()
			var ve *pipeline.ValidationError
			switch {
			case tt.field == "" && err != nil:
				t.Fatalf("Validate = %v", err)
			case tt.field != "" && (!errors.As(err, &ve) || ve.Field != tt.field):
				t.Fatalf("Validate = %v, want a ValidationError of %s", err, tt.field)
			}
			if tt.field == "" && b.NeedsSender() != tt.f.Sender {
				t.Fatalf("NeedsSender = %v", b.NeedsSender())
			}
		})
	}
}
