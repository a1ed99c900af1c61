package chaos

import (
	"context"
	"errors"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/tickflow/tickflow/internal/records"
	"github.com/tickflow/tickflow/internal/streams"
	"github.com/tickflow/tickflow/pipeline"
)

// pollEvery is how often the burn-down is looked at.
const pollEvery = 250 * time.Millisecond

// burnDown waits until every submission is accepted and its batch
// finished, killing a server at the scenario's moments on the way. Running
// out of time is not an error: the checker reports the batches lost.
func burnDown(ctx context.Context, sys *System, sc Scenario, o Options, subs []*Submission, admin *nats.Conn, submitted <-chan error) error {
	js, err := jetstream.New(admin)
	if err != nil {
		return err
	}
	kills := sc.ServerKills
	start := time.Now()
	allIn := false
	lastNote := time.Now()
	var upSince time.Time // when JetStream last came back; zero while it is down
	var counted callbackCount
	for {
		select {
		case err := <-submitted:
			if err != nil && !errors.Is(err, context.DeadlineExceeded) {
				return err
			}
			allIn = true
		case <-ctx.Done():
			o.progress("%s: deadline reached before every batch finished", sc.Name)
			return nil
		case <-time.After(pollEvery):
		}
		finished, up := counted.update(ctx, js)
		switch {
		case !up:
			upSince = time.Time{}
			continue
		case upSince.IsZero():
			upSince = time.Now()
		}
		// A server is killed again only once the system has had a moment
		// back: a backlog drains fast and would bunch the kills together.
		if len(kills) > 0 && time.Since(start) >= kills[0] && time.Since(upSince) >= serverUpBetweenKills && replicasCurrent(ctx, js, len(sys.Servers)) {
			kills = kills[1:]
			o.progress("%s: %d of %d batches finished", sc.Name, finished, len(subs))
			killServer(ctx, sys, sc, o, admin)
			upSince = time.Time{}
			continue
		}
		if time.Since(lastNote) > 10*time.Second {
			o.progress("%s: %d of %d batches finished", sc.Name, finished, len(subs))
			lastNote = time.Now()
		}
		if allIn && finished >= answered(subs) && allTerminal(ctx, js, subs) {
			return nil
		}
	}
}

// serverUpBetweenKills is how long the servers are up between two server
// kills at least.
const serverUpBetweenKills = 3 * time.Second

// callbackCount counts the callbacks stored so far, about one per finished
// batch (one published again after a crash counts again): a message of
// CALLBACKS holds one, or a group of them (its Count header says how
// many). Each look reads only the messages stored since the last.
type callbackCount struct {
	next uint64 // the next sequence to read
	n    int
}

// update reads what was stored since the last look and returns the count,
// and whether JetStream answered.
func (c *callbackCount) update(ctx context.Context, js jetstream.JetStream) (int, bool) {
	ictx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	s, err := js.Stream(ictx, streams.StreamCallbacks)
	if err != nil {
		return c.n, false
	}
	st := s.CachedInfo().State
	c.next = max(c.next, st.FirstSeq)
	for ; st.Msgs > 0 && c.next <= st.LastSeq; c.next++ {
		m, err := s.GetMsg(ictx, c.next)
		switch {
		case errors.Is(err, jetstream.ErrMsgNotFound):
			continue
		case err != nil:
			return c.n, false // read again at the next look
		}
		c.n += streams.CallbacksIn(m.Header)
	}
	return c.n, true
}

// answered counts the submissions that were answered (every one but the
// plain ones whose answer did not come).
func answered(subs []*Submission) int {
	n := 0
	for _, s := range subs {
		if !s.Unanswered {
			n++
		}
	}
	return n
}

// allTerminal reports whether every accepted batch's record is terminal,
// and with a plain submission unanswered, every record.
func allTerminal(ctx context.Context, js jetstream.JetStream, subs []*Submission) bool {
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	kv, err := js.KeyValue(rctx, streams.BucketBatches)
	if err != nil {
		return false
	}
	plain := false
	for _, s := range subs {
		if s.Unanswered {
			plain = true
			continue
		}
		if !s.Accepted {
			return false
		}
		e, err := kv.Get(rctx, streams.BatchKey(s.ID))
		if err != nil {
			return false
		}
		rec, err := records.Decode[records.BatchRecord](e.Value())
		if err != nil || !rec.Status.Terminal() {
			return false
		}
	}
	if plain {
		// A plain submission whose answer did not come may be recorded:
		// every record, known to a client or not, must be terminal.
		return everyRecordTerminal(rctx, js)
	}
	return true
}

// everyRecordTerminal reports whether every batch record is terminal.
func everyRecordTerminal(ctx context.Context, js jetstream.JetStream) bool {
	st := &State{Records: map[uint64]records.BatchRecord{}}
	if err := readRecords(ctx, js, st); err != nil {
		return false
	}
	for _, rec := range st.Records {
		if !rec.Status.Terminal() {
			return false
		}
	}
	return true
}

// settle waits until every process runs again, the queues are empty and
// authz has applied every callback, for at most two AckWaits: a token a
// killed processor held comes back after one.
func settle(ctx context.Context, sys *System, admin *nats.Conn, ackWait time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, 2*ackWait+10*time.Second)
	defer cancel()
	js, err := jetstream.New(admin)
	if err != nil {
		return err
	}
	for {
		if settled(ctx, sys, js) {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(pollEvery):
		}
	}
}

func settled(ctx context.Context, sys *System, js jetstream.JetStream) bool {
	for _, p := range sys.components() {
		if p.PID() == 0 {
			return false
		}
	}
	for _, s := range sys.Servers {
		if s.PID() == 0 {
			return false
		}
	}
	ictx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	for _, p := range []pipeline.Priority{pipeline.High, pipeline.Med} {
		s, err := js.Stream(ictx, streams.QueueStream(p))
		if err != nil {
			return false
		}
		if n, err := streams.QueueTokens(ictx, s, p); err != nil || n != 0 {
			return false
		}
	}
	c, err := js.Consumer(ictx, streams.StreamCallbacks, streams.CallbacksConsumer)
	if err != nil {
		return false
	}
	ci := c.CachedInfo()
	return ci.NumPending == 0 && ci.NumAckPending == 0
}
