package pipeline_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/tickflow/tickflow/pipeline"
)

// A retry logic computes the delay before each retry; the worked
// numbers: linear from 1s by 2s capped at 7s, exponential from 1s ×2 capped at 9s.
func ExampleRetryLogic_Base() {
	linear := pipeline.RetryLogic{Times: 5, Backoff: pipeline.Backoff{Kind: pipeline.Linear,
		Initial: pipeline.Duration(time.Second), Increment: pipeline.Duration(2 * time.Second), Max: pipeline.Duration(7 * time.Second)}}
	exp := pipeline.RetryLogic{Times: 5, Backoff: pipeline.Backoff{Kind: pipeline.Exponential,
		Initial: pipeline.Duration(time.Second), Multiplier: 2, Max: pipeline.Duration(9 * time.Second)}}
	for n := 1; n <= 5; n++ {
		fmt.Println(n, linear.Base(n), exp.Base(n))
	}
	// Output:
	// 1 1s 1s
	// 2 3s 2s
	// 3 5s 4s
	// 4 7s 8s
	// 5 7s 9s
}

// A ServeMux routes calls by function type, net/http style; a handler marks
// an error that no retry can fix as permanent.
func ExampleServeMux() {
	mux := pipeline.NewServeMux()
	mux.RegisterFunc("greet", func(_ context.Context, c *pipeline.Call) (pipeline.Result, error) {
		var name string
		if err := c.Payload.Decode(&name); err != nil || name == "" {
			return pipeline.Result{}, pipeline.Permanent(errors.New("greet: a name is required"))
		}
		return pipeline.Result{Data: pipeline.MustPayload("hello " + name)}, nil
	})
	res, _ := mux.Handle(context.Background(), &pipeline.Call{Type: "greet", Payload: pipeline.MustPayload("ada")})
	var out string
	_ = res.Data.Decode(&out)
	fmt.Println(out)
	_, err := mux.Handle(context.Background(), &pipeline.Call{Type: "greet"})
	fmt.Println(err, pipeline.IsPermanent(err))
	_, err = mux.Handle(context.Background(), &pipeline.Call{Type: "wave"})
	fmt.Println(errors.Is(err, pipeline.ErrNoHandler), pipeline.IsPermanent(err))
	// Output:
	// hello ada
	// greet: a name is required true
	// true true
}
