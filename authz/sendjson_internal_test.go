package authz

import (
	"reflect"
	"strings"
	"testing"

	"github.com/tickflow/tickflow/api"
)

// sendBodies are send requests in the fast path's shape and just outside
// it: each must decode as decodeJSON decodes it, or fail as it fails.
var sendBodies = []string{
	`{"label":"pay-high","functions":[{"type":"noop"}]}`,
	` { "label" : "pay" , "functions" : [ { "type" : "noop" , "payload" : {"b":1,"a":[1,2.5,"x\"y",null,true]} } , {"type":"t","expect":"ok"} ] , "key" : "k1" , "idempotency_key" : "i1" } `,
	`{"label":"pay","functions":[{"type":"noop","payload":"plain"}],"label":"other"}`,
	`{"label":"pay","functions":[{"type":"noop","payload":12345678901234567890123}]}`,
	`{"label":"pay","functions":[{"type":"noop","payload":1e999}]}`,
	`{"label":"pay","functions":[{"type":"noop","payload":null}]}`,
	`{"label":"pay","functions":[{"type":"noop","payload":{"a":1,"a":2}}]}`,
	`{"label":"pay","functions":[{"type":"noop","payload":{"a":1,}}]}`,
	`{"label":"pay","functions":[{"type":"noop","extra":1}]}`,
	`{"label":"pay","functions":[{"Type":"noop"}]}`,
	`{"Label":"pay","functions":[]}`,
	`{"label":"p\u0061y","functions":null}`,
	`{"label":"pay","functions":[]}`,
	`{"label":"pay","functions":[{"type":"noop"}]} {}`,
	`{"label":"pay","functions":[{"type":"noop"}]`,
	`{"label":"pay","nope":true}`,
	`{"label":5}`,
	`{"label":"pay\xff","functions":[{"type":"noop"}]}`,
	`{}`,
	``,
	`   `,
	`[]`,
	`{"label":"pay","functions":[{"type":"noop","payload":[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]}]}`,
}

// TestDecodeSendMatchesDecodeJSON: the send request's fast decoder reads
// every body as the generic one does, errors included.
func TestDecodeSendMatchesDecodeJSON(t *testing.T) {
	for _, body := range sendBodies {
		checkDecodeSend(t, []byte(body))
	}
}

func checkDecodeSend(t *testing.T, body []byte) { checkDecode(t, body, decodeSend) }

// checkDecode checks that decode reads body as decodeJSON does, or fails
// as it fails.
func checkDecode[T any](t *testing.T, body []byte, decode func([]byte, *T) error) {
	t.Helper()
	var fast, slow T
	ferr := decode(body, &fast)
	serr := decodeJSON(body, &slow)
	if (ferr == nil) != (serr == nil) || (ferr != nil && ferr.Error() != serr.Error()) {
		t.Fatalf("body %q: fast path's error %v, decodeJSON's %v", body, ferr, serr)
	}
	if ferr == nil && !reflect.DeepEqual(fast, slow) {
		t.Fatalf("body %q: the fast path read %+v, decodeJSON %+v", body, fast, slow)
	}
}

// TestDecodeSendTakesTheFastPath: the common shapes do not fall back.
func TestDecodeSendTakesTheFastPath(t *testing.T) {
	for _, body := range sendBodies[:3] {
		var req api.SendRequest
		if !fastSend([]byte(body), &req) {
			t.Errorf("body %q took the slow path", body)
		}
	}
}

// FuzzDecodeSend: any body, well-formed or not, decodes or fails alike
// on both paths.
func FuzzDecodeSend(f *testing.F) {
	for _, b := range sendBodies {
		f.Add([]byte(b))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		checkDecodeSend(t, body)
	})
}

func BenchmarkDecodeSend(b *testing.B) {
	body := []byte(sendBodies[0])
	b.ReportAllocs()
	for b.Loop() {
		var req api.SendRequest
		if err := decodeSend(body, &req); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDecodeSendGeneric(b *testing.B) {
	body := []byte(sendBodies[0])
	b.ReportAllocs()
	for b.Loop() {
		var req api.SendRequest
		if err := decodeJSON(body, &req); err != nil {
			b.Fatal(err)
		}
	}
}

// sendManyBodies are send_many requests in the fast path's shape and just
// outside it.
var sendManyBodies = []string{
	`{"batches":[{"label":"pay","functions":[{"type":"noop"}]},{"label":"ship","key":"k","functions":[{"type":"noop","payload":{"a":1}}]}]}`,
	` { "batches" : [ { "label" : "pay" , "functions" : [ { "type" : "noop" } ] } ] } `,
	`{"batches":[]}`,
	`{"batches":null}`,
	`{}`,
	`{"batches":[{"label":"pay","functions":[{"type":"noop"}]}],"batches":[{"label":"b","functions":[{"type":"t"}]}]}`,
	`{"batches":[{"label":"a","functions":[{"type":"noop","payload":"x"}],"key":"k"}],"batches":[{"label":"b","functions":[{"type":"t"}]}]}`,
	`{"batches":[{"label":"p\u0061y","functions":[{"type":"noop"}]}]}`,
	`{"batches":[{"label":"pay","functions":[{"type":"noop"}]},]}`,
	`{"batches":[{"label":"pay","functions":[{"type":"noop"}]}]} []`,
	`{"batches":[{"label":"pay","nope":1}]}`,
	`{"Batches":[{"label":"pay","functions":[{"type":"noop"}]}]}`,
	`{"batches":{"label":"pay"}}`,
	`{"batches":[null]}`,
	`[]`,
	``,
}

// TestDecodeSendManyMatchesDecodeJSON: the send_many request's fast decoder
// reads every body as the generic one does, errors included.
func TestDecodeSendManyMatchesDecodeJSON(t *testing.T) {
	for _, body := range sendManyBodies {
		checkDecodeSendMany(t, []byte(body))
	}
	// Each send body, as the one batch of a send_many.
	for _, body := range sendBodies {
		checkDecodeSendMany(t, []byte(`{"batches":[`+body+`]}`))
	}
}

func checkDecodeSendMany(t *testing.T, body []byte) { checkDecode(t, body, decodeSendMany) }

// TestDecodeSendManyTakesTheFastPath: the common shapes do not fall back,
// and neither does a request of api.MaxSendMany batches; one more does.
func TestDecodeSendManyTakesTheFastPath(t *testing.T) {
	for _, body := range sendManyBodies[:2] {
		var req api.SendManyRequest
		if !fastSendMany([]byte(body), &req) {
			t.Errorf("body %q took the slow path", body)
		}
	}
	for _, n := range []int{api.MaxSendMany, api.MaxSendMany + 1} {
		body := `{"batches":[` + strings.Repeat(sendBodies[0]+",", n-1) + sendBodies[0] + `]}`
		var req api.SendManyRequest
		if fast := fastSendMany([]byte(body), &req); fast != (n <= api.MaxSendMany) || (fast && len(req.Batches) != n) {
			t.Errorf("%d batches: fast path %v with %d read", n, fast, len(req.Batches))
		}
	}
}

// FuzzDecodeSendMany: any body decodes or fails alike on both paths.
func FuzzDecodeSendMany(f *testing.F) {
	for _, b := range sendManyBodies {
		f.Add([]byte(b))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		checkDecodeSendMany(t, body)
	})
}
