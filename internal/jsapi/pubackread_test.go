package jsapi_test

import (
	"errors"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/tickflow/tickflow/internal/jsapi"
)

// TestReadPubAck: the server's success answers read without reflection
// (a domain and a duplicate included), any other success as jetstream
// reads it, an error answer as the stream's API error, and garbage, an
// answer naming no stream or a sequence past a uint64 as an invalid ack.
func TestReadPubAck(t *testing.T) {
	noStream := &nats.Msg{Header: nats.Header{"Status": []string{"503"}}}
	for _, tc := range []struct {
		name string
		m    *nats.Msg
		want jsapi.PubAck
		err  error
	}{
		{"template", body(`{"stream":"KV_batches","seq":42}`), jsapi.PubAck{Seq: 42}, nil},
		{"duplicate", body(`{"stream":"HIGH","seq":7,"duplicate": true}`), jsapi.PubAck{Seq: 7, Duplicate: true}, nil},
		{"duplicate, compact", body(`{"stream":"HIGH","seq":7,"duplicate":true}`), jsapi.PubAck{Seq: 7, Duplicate: true}, nil},
		{"domain", body(`{"stream":"HIGH","domain":"hub","seq":9}`), jsapi.PubAck{Seq: 9}, nil},
		{"batch", body(`{"stream":"HIGH","seq":9,"batch":"b","count":2}`), jsapi.PubAck{Seq: 9}, nil},
		{"escaped name", body(`{"stream":"H\"I","seq":3}`), jsapi.PubAck{Seq: 3}, nil},
		{"error", body(`{"error":{"code":400,"err_code":10071,"description":"wrong last sequence: 3"},"stream":"KV_batches","seq":0}`), jsapi.PubAck{}, &jetstream.APIError{}},
		{"no stream named", body(`{"stream":"","seq":3}`), jsapi.PubAck{}, jetstream.ErrInvalidJSAck},
		{"garbage", body(`{"stream":"HIGH","seq":`), jsapi.PubAck{}, jetstream.ErrInvalidJSAck},
		{"overflow", body(`{"stream":"HIGH","seq":99999999999999999999999}`), jsapi.PubAck{}, jetstream.ErrInvalidJSAck},
		{"empty", body(""), jsapi.PubAck{}, jetstream.ErrInvalidJSAck},
		{"no responders", noStream, jsapi.PubAck{}, jetstream.ErrNoStreamResponse},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := jsapi.ReadPubAck(tc.m)
			var ae *jetstream.APIError
			switch {
			case got != tc.want:
				t.Fatalf("ReadPubAck(%s) = %+v; want %+v", tc.m.Data, got, tc.want)
			case tc.err == nil && err != nil:
				t.Fatalf("ReadPubAck(%s): %v", tc.m.Data, err)
			case errors.As(tc.err, &ae):
				if !errors.As(err, &ae) || ae.ErrorCode != jetstream.JSErrCodeStreamWrongLastSequence {
					t.Fatalf("ReadPubAck(%s): %v, want the wrong-last-sequence API error", tc.m.Data, err)
				}
			case tc.err != nil && !errors.Is(err, tc.err):
				t.Fatalf("ReadPubAck(%s): %v, want %v", tc.m.Data, err, tc.err)
			}
		})
	}
}

func body(s string) *nats.Msg { return &nats.Msg{Data: []byte(s)} }

func BenchmarkReadPubAck(b *testing.B) {
	m := body(`{"stream":"KV_batches","seq":123456}`)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := jsapi.ReadPubAck(m); err != nil {
			b.Fatal(err)
		}
	}
}
