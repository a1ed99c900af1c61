package authz

import (
	"reflect"
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

func checkDecodeSend(t *testing.T, body []byte) {
	t.Helper()
	var fast, slow api.SendRequest
	ferr := decodeSend(body, &fast)
	serr := decodeJSON(body, &slow)
	if (ferr == nil) != (serr == nil) || (ferr != nil && ferr.Error() != serr.Error()) {
		t.Fatalf("body %q: decodeSend error %v, decodeJSON error %v", body, ferr, serr)
	}
	if ferr == nil && !reflect.DeepEqual(fast, slow) {
		t.Fatalf("body %q: decodeSend read %+v, decodeJSON read %+v", body, fast, slow)
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
