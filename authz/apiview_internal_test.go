package authz

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/tickflow/tickflow/api"
	"github.com/tickflow/tickflow/internal/records"
	"github.com/tickflow/tickflow/pipeline"
)

// TestAPIViewsMatchRecords: a record with every field set, copied into
// its API view, encodes to the JSON the record encodes to, byte for byte:
// the batch operation answers what it answered when it served the records
// themselves, and a field added to a record but not to its view (or not
// copied) fails here.
func TestAPIViewsMatchRecords(t *testing.T) {
	var rec records.BatchRecord
	fill(reflect.ValueOf(&rec).Elem(), 1)
	var prog records.Progress
	fill(reflect.ValueOf(&prog).Elem(), 1)
	prog.State = records.Parked
	var win records.ThrottleWindow
	fill(reflect.ValueOf(&win).Elem(), 1)
	tw := api.ThrottleWindow(win)
	for _, tc := range []struct {
		name         string
		record, view any
	}{
		{"batch record", &rec, apiRecord(&rec)},
		{"empty batch record", &records.BatchRecord{}, apiRecord(&records.BatchRecord{})},
		{"progress", &prog, apiProgress(&prog)},
		{"empty progress", &records.Progress{}, apiProgress(&records.Progress{})},
		{"waiting", prog.Waiting, apiWaiting(prog.Waiting)},
		{"throttle window", &win, &tw},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want, err := json.Marshal(tc.record)
			if err != nil {
				t.Fatal(err)
			}
			got, err := json.Marshal(tc.view)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != string(want) {
				t.Fatalf("the view encodes as\n%s\nthe record as\n%s", got, want)
			}
		})
	}
	if got := apiRecord(nil); got != nil {
		t.Fatalf("apiRecord(nil) = %+v", got)
	}
	if got := apiProgress(nil); got != nil {
		t.Fatalf("apiProgress(nil) = %+v", got)
	}
}

// fill sets every field v holds, recursively, to a value that is not its
// zero value and differs from its siblings' (seed), so that a field left
// out or copied into another shows in the JSON.
func fill(v reflect.Value, seed int) {
	switch v.Kind() {
	case reflect.Struct:
		if v.Type() == reflect.TypeFor[time.Time]() {
			v.Set(reflect.ValueOf(time.Date(2024, 1, 1, 0, 0, seed, 0, time.UTC)))
			return
		}
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				fill(v.Field(i), seed*31+i+1)
			}
		}
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
		fill(v.Elem(), seed)
	case reflect.Slice:
		if v.Type() == reflect.TypeFor[pipeline.Payload]() {
			v.Set(reflect.ValueOf(pipeline.MustPayload(seed)))
			return
		}
		v.Set(reflect.MakeSlice(v.Type(), 2, 2))
		for i := range 2 {
			fill(v.Index(i), seed+i)
		}
	case reflect.Map:
		v.Set(reflect.MakeMap(v.Type()))
		k, e := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
		fill(k, seed)
		fill(e, seed+1)
		v.SetMapIndex(k, e)
	case reflect.String:
		v.SetString("s" + string(rune('a'+seed%26)))
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(int64(seed%100 + 1))
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v.SetUint(uint64(seed%100 + 1))
	case reflect.Float32, reflect.Float64:
		v.SetFloat(float64(seed) + 0.5)
	}
}
