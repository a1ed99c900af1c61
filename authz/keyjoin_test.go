package authz_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/micro"
	"github.com/tickflow/tickflow/api"
	"github.com/tickflow/tickflow/authz"
	"github.com/tickflow/tickflow/internal/keyorder"
	"github.com/tickflow/tickflow/internal/streams"
	"github.com/tickflow/tickflow/internal/testnats"
	"github.com/tickflow/tickflow/pipeline"
)

// sharedKeyTable lets alice and bob submit to one domain under one label,
// with the default bound on each one's batches per key.
const sharedKeyTable = `
domains:
  pay:
    allowed_types: [seq.step, seq.wait]
labels:
  seq:
    domain: pay
    users: [alice, bob]
    mode: non_atomic
    priority: med
    functions:
      seq.step: {}
      seq.wait: {confirm: {timeout: 1m, by: [oracle]}}
`

// TestKeyJoinsUnderContention: 768 sends on one key, 64 at a time over two
// authz replicas, 7 of 8 senders alice and 1 bob: every send is answered
// with its batch, every batch is in its key's order, each sender's batches
// in the order it sent them, and the batches then run one at a time in that
// order; none is left InProcess.
func TestKeyJoinsUnderContention(t *testing.T) {
	const senders, each = 64, 12
	// Both may keep every send in flight: the contention is on the key,
	// not on the callers' share of authz's workers.
	table := strings.Replace(sharedKeyTable, "    priority: med\n", "    priority: med\n    max_per_key: 1000\n", 1) +
		"callers:\n  alice: {max_requests: 1000}\n  bob: {max_requests: 1000}\n"
	b := keyedSetupWith(t, 2, table)
	b.startKeyedAuthz(t) // a second replica: joins race across replicas too
	body, err := json.Marshal(api.SendRequest{Label: "seq", Key: "hot", Functions: api.Calls{{Type: "seq.step"}}})
	if err != nil {
		t.Fatal(err)
	}
	sent := make([][]uint64, senders)
	var mu sync.Mutex
	var failures []string
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range senders {
		user := "alice"
		if i%8 == 7 {
			user = "bob"
		}
		nc := b.conn(t, user)
		wg.Go(func() {
			<-start
			for range each {
				m, err := nc.Request(streams.AuthzSubject(user, api.OpSend), body, 30*time.Second)
				if err == nil && m.Header.Get(micro.ErrorCodeHeader) != "" {
					err = fmt.Errorf("%s %s", m.Header.Get(micro.ErrorCodeHeader), m.Header.Get(micro.ErrorHeader))
				}
				var rep api.SendReply
				if err == nil {
					err = json.Unmarshal(m.Data, &rep)
				}
				if err != nil {
					mu.Lock()
					failures = append(failures, fmt.Sprintf("%s: %v", user, err))
					mu.Unlock()
					continue
				}
				sent[i] = append(sent[i], rep.ID)
			}
		})
	}
	close(start)
	wg.Wait()
	if len(failures) > 0 {
		t.Fatalf("%d of %d sends on one key failed, the first: %s", len(failures), senders*each, strings.Join(failures[:min(3, len(failures))], "; "))
	}

	ctx := testnats.Context(t, 2*time.Minute)
	kv, err := b.env.JS(t, "admin").KeyValue(ctx, streams.BucketKeys)
	if err != nil {
		t.Fatal(err)
	}
	q, err := keyorder.New(kv, nil).Load(ctx, domain, "hot")
	if err != nil {
		t.Fatal(err)
	}
	place := make(map[uint64]int, len(q.IDs))
	for i, id := range q.IDs {
		place[id] = i
	}
	for i, ids := range sent {
		for j, id := range ids {
			at, ok := place[id]
			if !ok {
				t.Fatalf("batch %d was answered but is not in its key's order (%d listed)", id, len(q.IDs))
			}
			if j > 0 && at < place[ids[j-1]] {
				t.Fatalf("sender %d's batch %d stands before its earlier batch %d in the key's order", i, id, ids[j-1])
			}
		}
	}
	if len(q.IDs) != senders*each {
		t.Fatalf("the key's order lists %d batches, want the %d sent", len(q.IDs), senders*each)
	}

	stop := b.drive(t)
	testnats.Eventually(t, 2*time.Minute, "every batch of the key executed", func() bool {
		return b.status(t, q.IDs[len(q.IDs)-1]) == pipeline.Executed
	})
	stop()
	var ran []uint64
	for _, sp := range b.rec.all() {
		ran = append(ran, sp.batch)
	}
	if !slices.Equal(ran, q.IDs) {
		t.Fatalf("the key's batches ran in an order other than its own (%d ran of %d)", len(ran), len(q.IDs))
	}
	for _, id := range q.IDs {
		if st := b.status(t, id); st != pipeline.Executed {
			t.Fatalf("batch %d is %s after its key drained, want Executed", id, st)
		}
	}
}

// TestKeyBoundPerSubmitter: of 200 sends of alice on one key, 16 at a time
// over two authz replicas, exactly the default per-key bound are accepted;
// the others are refused with a 429 naming the bound, and a refused batch
// that was recorded already is finished as removed, not left InProcess.
// bob's send on the key is accepted beside hers; the owner's keys listing
// shows who holds the key and who waits, the owner cancels alice's batches
// by id, head and waiting alike, and bob's batch runs next; alice, her
// batches finished, may send on the key again.
func TestKeyBoundPerSubmitter(t *testing.T) {
	const tries, parallel = 200, 16
	b := keyedSetupWith(t, 1, sharedKeyTable)
	b.startKeyedAuthz(t)
	body, err := json.Marshal(api.SendRequest{Label: "seq", Key: "victim", Functions: api.Calls{{Type: "seq.step"}}})
	if err != nil {
		t.Fatal(err)
	}
	nc := b.conn(t, "alice")
	var mu sync.Mutex
	var accepted, removed []uint64
	refused := 0
	var other []string
	notQueued := regexp.MustCompile(`batch (\d+) is not queued`)
	var wg sync.WaitGroup
	for w := range parallel {
		wg.Go(func() {
			for i := w; i < tries; i += parallel {
				m, err := nc.Request(streams.AuthzSubject("alice", api.OpSend), body, 30*time.Second)
				mu.Lock()
				switch {
				case err != nil:
					other = append(other, err.Error())
				case m.Header.Get(micro.ErrorCodeHeader) == "":
					var rep api.SendReply
					if err := json.Unmarshal(m.Data, &rep); err != nil {
						other = append(other, err.Error())
					}
					accepted = append(accepted, rep.ID)
				case m.Header.Get(micro.ErrorCodeHeader) == "429" && strings.Contains(m.Header.Get(micro.ErrorHeader), fmt.Sprintf("max_per_key %d", authz.DefaultMaxPerKey)):
					refused++
					if sm := notQueued.FindStringSubmatch(m.Header.Get(micro.ErrorHeader)); sm != nil {
						id, _ := strconv.ParseUint(sm[1], 10, 64)
						removed = append(removed, id)
					}
				default:
					other = append(other, m.Header.Get(micro.ErrorCodeHeader)+" "+m.Header.Get(micro.ErrorHeader))
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if len(other) > 0 {
		t.Fatalf("%d sends failed otherwise than over the bound, the first: %s", len(other), other[0])
	}
	if len(accepted) != authz.DefaultMaxPerKey || refused != tries-authz.DefaultMaxPerKey {
		t.Fatalf("of %d sends on one key %d were accepted and %d refused with a 429 naming the bound, want %d accepted", tries, len(accepted), refused, authz.DefaultMaxPerKey)
	}
	// A refusal after its batch was recorded leaves the batch finished.
	b.waitStatus(t, pipeline.RemovedByOwner, removed...)
	bobs := b.sendAs(t, "bob", "victim")

	ks := b.keys(t)["victim"]
	if ks.Submitter != "alice" || ks.Waiting != authz.DefaultMaxPerKey || ks.WaitingBy["alice"] != authz.DefaultMaxPerKey-1 || ks.WaitingBy["bob"] != 1 {
		t.Fatalf("key victim: %+v, want alice's head, and 9 of alice's and 1 of bob's waiting", ks)
	}
	var one api.KeysReply
	if e := b.call(t, "owner", api.OpKeys, api.KeysRequest{Domain: domain, Key: "victim"}, &one); e != nil {
		t.Fatal(e)
	}
	if len(one.Keys) != 1 || len(one.Keys[0].Batches) != authz.DefaultMaxPerKey+1 {
		t.Fatalf("key victim alone: %+v, want its %d batches", one, authz.DefaultMaxPerKey+1)
	}
	var alices []uint64
	for i, kb := range one.Keys[0].Batches {
		want := "alice"
		if i == authz.DefaultMaxPerKey {
			want = "bob"
		}
		if kb.Submitter != want {
			t.Fatalf("batch %d of key victim: %+v, want %s's", i, kb, want)
		}
		if want == "alice" {
			alices = append(alices, kb.ID)
		}
	}
	slices.Sort(accepted)
	if listed := slices.Sorted(slices.Values(alices)); !slices.Equal(listed, accepted) {
		t.Fatalf("alice's batches in the key's order %v, want the accepted %v", alices, accepted)
	}

	for _, id := range slices.Backward(alices) {
		var rep api.CancelReply
		if e := b.call(t, "owner", api.OpCancel, api.IDRequest{ID: id}, &rep); e != nil {
			t.Fatalf("the owner cancels alice's batch %d: %+v", id, e)
		}
	}
	stop := b.drive(t)
	b.waitStatus(t, pipeline.Executed, bobs)
	stop()
	b.waitStatus(t, pipeline.RemovedByOwner, alices...)
	for _, id := range alices {
		if b.rec.ran(id) {
			t.Fatalf("alice's batch %d ran after the owner cancelled it", id)
		}
	}
	b.sendAs(t, "alice", "victim") // her batches finished: she may send again
}

// sendAs sends one seq.step batch as user on key and returns its id.
func (b *keyedBundle) sendAs(t *testing.T, user, key string) uint64 {
	t.Helper()
	var rep api.SendReply
	if e := b.call(t, user, api.OpSend, api.SendRequest{Label: "seq", Key: key, Functions: api.Calls{{Type: "seq.step"}}}, &rep); e != nil {
		t.Fatalf("%s sends on %s: %+v", user, key, e)
	}
	return rep.ID
}

// TestMaxPerKeyTable: a label's max_per_key sets its per-key bound, unset
// it is the default, and a negative one is refused naming the field.
func TestMaxPerKeyTable(t *testing.T) {
	table, err := authz.ParseTable([]byte(strings.Replace(sharedKeyTable, "    priority: med\n", "    priority: med\n    max_per_key: 3\n", 1)))
	if err != nil {
		t.Fatal(err)
	}
	if got := table.Labels["seq"].KeyBound(); got != 3 {
		t.Fatalf("bound with max_per_key 3: %d", got)
	}
	if got := (&authz.Label{}).KeyBound(); got != authz.DefaultMaxPerKey {
		t.Fatalf("bound of a label without max_per_key: %d, want %d", got, authz.DefaultMaxPerKey)
	}
	_, err = authz.ParseTable([]byte(strings.Replace(sharedKeyTable, "    priority: med\n", "    priority: med\n    max_per_key: -1\n", 1)))
	if !errors.Is(err, authz.ErrTable) || !strings.Contains(err.Error(), "labels.seq.max_per_key") {
		t.Fatalf("a negative max_per_key: %v, want a table error naming it", err)
	}
}
