package jsapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// directScanBatch is how many messages one request of DirectScan asks
// for: the server reads them holding the stream's read lock, which every
// store into the stream waits for, so an answer is kept short.
const directScanBatch = 256

// DirectScan reads the messages of stream whose subject matches filter
// (wildcards allowed) stored from start on, oldest first, and hands each
// to f, with its headers (the stored ones and the server's Nats-Sequence
// and Nats-Subject) and data, until f returns an error or the stream holds
// no more: batched direct gets, 256 messages a round trip, so a scan reads
// no message twice and creates no consumer (a work-queue stream allows no
// consumer whose subjects overlap its consumers'). The stream must
// allow direct gets, and the identity must be allowed to publish to
// $JS.API.DIRECT.GET.<stream>. Messages stored while it scans may or may
// not be read, and so may the newest ones of a replicated stream: any
// replica answers a direct get, and a follower may be behind its leader.
func DirectScan(ctx context.Context, nc *nats.Conn, stream, filter string, start time.Time, f func(*nats.Msg) error) error {
	sub, err := nc.SubscribeSync(nc.NewInbox())
	if err != nil {
		return fmt.Errorf("jsapi: scan %s: subscribe: %w", stream, err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	subject := "$JS.API.DIRECT.GET." + stream
	type request struct {
		Seq       uint64     `json:"seq,omitempty"`
		NextFor   string     `json:"next_by_subj"`
		Batch     int        `json:"batch"`
		StartTime *time.Time `json:"start_time,omitempty"`
	}
	st := start.UTC()
	req := request{NextFor: filter, Batch: directScanBatch, StartTime: &st}
	for {
		body, err := json.Marshal(req)
		if err != nil {
			return err
		}
		if err := nc.PublishRequest(subject, sub.Subject, body); err != nil {
			return fmt.Errorf("jsapi: scan %s: %w", stream, err)
		}
		last, more, err := readScanBatch(ctx, sub, f)
		if err != nil || !more {
			if err != nil {
				err = fmt.Errorf("jsapi: scan %s: %w", stream, err)
			}
			return err
		}
		req = request{Seq: last + 1, NextFor: filter, Batch: directScanBatch}
	}
}

// errScanTimeout ends a scan whose answer fell silent.
var errScanTimeout = errors.New("the server did not answer the direct get in time")

// directScanSilence is how long DirectScan waits for the next message of
// an answer.
const directScanSilence = 5 * time.Second

// readScanBatch reads one answer of DirectScan: the messages, each handed
// to f, then the end of the batch. It returns the last sequence read and
// whether more may follow it.
func readScanBatch(ctx context.Context, sub *nats.Subscription, f func(*nats.Msg) error) (last uint64, more bool, err error) {
	for {
		wctx, cancel := context.WithTimeout(ctx, directScanSilence)
		m, err := sub.NextMsgWithContext(wctx)
		cancel()
		switch {
		case errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil:
			return last, false, errScanTimeout
		case err != nil:
			return last, false, err
		}
		if status := m.Header.Get("Status"); status != "" && len(m.Data) == 0 {
			switch status {
			case "404": // nothing (more) from there on
				return last, false, nil
			case "204": // the end of the batch
				pending, _ := strconv.ParseUint(m.Header.Get("Nats-Num-Pending"), 10, 64)
				return last, pending > 0 && last > 0, nil
			case "503":
				return last, false, jetstream.ErrNoStreamResponse
			}
			return last, false, fmt.Errorf("the server answered %s %s", status, m.Header.Get("Description"))
		}
		seq, perr := strconv.ParseUint(m.Header.Get(jetstream.SequenceHeader), 10, 64)
		if perr != nil || seq == 0 {
			return last, false, fmt.Errorf("an answer without a sequence (%q)", m.Header.Get(jetstream.SequenceHeader))
		}
		last = seq
		if err := f(m); err != nil {
			return last, false, err
		}
	}
}
