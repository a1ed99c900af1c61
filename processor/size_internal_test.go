package processor

import (
	"errors"
	"strings"
	"testing"

	"github.com/tickflow/tickflow/internal/records"
	"github.com/tickflow/tickflow/pipeline"
)

func TestRecordLimitsFits(t *testing.T) {
	const maxPayload = 64 << 10
	l := recordLimits{maxPayload: func() int64 { return maxPayload }}
	b := &pipeline.Batch{ID: 1, Key: "k", Functions: []pipeline.Function{{Type: "t", Payload: []byte("p")}, {Type: "t"}}}
	out := func(n int) pipeline.Output {
		return pipeline.Output{Index: 0, Type: "t", Data: []byte(strings.Repeat("x", n))}
	}
	tests := []struct {
		name    string
		outputs []pipeline.Output
		extra   []pipeline.Output
		wantErr bool
	}{
		{name: "nothing yet", wantErr: false},
		{name: "a small output", extra: []pipeline.Output{out(100)}, wantErr: false},
		{name: "an output of half max_payload", extra: []pipeline.Output{out(maxPayload / 2)}, wantErr: false},
		{name: "an output as large as max_payload", extra: []pipeline.Output{out(maxPayload)}, wantErr: true},
		{name: "kept outputs and a new one together too large", outputs: []pipeline.Output{out(maxPayload / 2)}, extra: []pipeline.Output{out(maxPayload / 2)}, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			prog := &records.Progress{BatchID: 1, Outputs: tt.outputs}
			err := l.fits(b, prog, tt.extra...)
			if tt.wantErr != (err != nil) {
				t.Fatalf("fits = %v, want an error: %v", err, tt.wantErr)
			}
			if err != nil && !errors.Is(err, ErrOutputsTooLarge) {
				t.Fatalf("fits = %v, want ErrOutputsTooLarge", err)
			}
			if len(prog.Outputs) != len(tt.outputs) {
				t.Fatalf("fits changed the progress: %d outputs, want %d", len(prog.Outputs), len(tt.outputs))
			}
		})
	}
	if got := l.maxRecord(); got != maxPayload-1<<10 {
		t.Fatalf("maxRecord() = %d, want %d", got, maxPayload-1<<10)
	}
}
