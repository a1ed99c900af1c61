package streams

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/tickflow/tickflow/internal/records"
)

// PresenceTTL is how long a presence record outlives its last refresh: a
// process that dies without deleting its record drops out of the presence
// bucket this long after its last refresh (the bucket's MaxAge).
const PresenceTTL = 30 * time.Second

// PresenceRefresh is how often a running process writes its presence
// record again, well inside PresenceTTL.
const PresenceRefresh = 10 * time.Second

// ProcessorPresenceKey is the presence key of processor replica instance
// named name, serving domain: under "processor.", which nats.conf lets
// processors write, and nothing else.
func ProcessorPresenceKey(domain, name, instance string) string {
	return records.PresenceProcessor + "." + domain + "." + presenceToken(name) + "." + presenceToken(instance)
}

// WorkerPresenceKey is the presence key of worker instance named name:
// under "worker.", which nats.conf lets workers write, and nothing else.
func WorkerPresenceKey(name, instance string) string {
	return records.PresenceWorker + "." + presenceToken(name) + "." + presenceToken(instance)
}

// presenceToken makes a name one KV key token: itself when made of
// letters, digits, '-' and '_', else '=' and its unpadded URL-safe base64.
func presenceToken(s string) string {
	for _, r := range s {
		if !(r == '-' || r == '_' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z') {
			return "=" + base64.RawURLEncoding.EncodeToString([]byte(s))
		}
	}
	if s == "" {
		return "="
	}
	return s
}

// PresenceInstance returns a fresh random instance id, so that replicas
// sharing a name keep records of their own.
func PresenceInstance() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// KeepPresence writes rec under key in the presence bucket now and every
// PresenceRefresh until ctx is done, then deletes it. It never fails its
// caller: presence is advice to operators, so a bucket that is missing
// (a store provisioned before it existed) or a write refused is logged and
// retried at the next refresh. It returns once the record is deleted.
func KeepPresence(ctx context.Context, js jetstream.JetStream, key string, rec records.Presence, log *slog.Logger) {
	keepPresence(ctx, js, key, rec, PresenceRefresh, log)
}

func keepPresence(ctx context.Context, js jetstream.JetStream, key string, rec records.Presence, every time.Duration, log *slog.Logger) {
	var kv jetstream.KeyValue
	warned := false
	put := func() {
		var err error
		if kv == nil {
			if kv, err = js.KeyValue(ctx, BucketPresence); err != nil {
				kv = nil
			}
		}
		if err == nil {
			rec.At = time.Now().UTC()
			body, _ := json.Marshal(rec)
			_, err = kv.Put(ctx, key, body)
		}
		switch {
		case err != nil && ctx.Err() == nil && !warned:
			warned = true
			log.Warn("presence not recorded; authz may warn that nothing serves", "bucket", BucketPresence, "err", err)
		case err == nil && warned:
			warned = false
			log.Info("presence recorded again", "bucket", BucketPresence)
		}
	}
	put()
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			if kv != nil {
				dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
				defer cancel()
				if err := kv.Delete(dctx, key); err != nil {
					log.Debug("presence not deleted; it expires on its own", "err", err)
				}
			}
			return
		case <-t.C:
			put()
		}
	}
}

// ListPresence returns every live presence record, processors and workers.
func ListPresence(ctx context.Context, kv jetstream.KeyValue) ([]records.Presence, error) {
	var out []records.Presence
	err := EachValue(ctx, kv, ">", "list presence", func(e jetstream.KeyValueEntry) {
		// The kind is the key's, which nats.conf lets only that kind
		// write: a worker cannot claim to serve a domain.
		var p records.Presence
		if json.Unmarshal(e.Value(), &p) != nil {
			return
		}
		switch kind, _, _ := strings.Cut(e.Key(), "."); kind {
		case records.PresenceProcessor:
			p.Kind, p.Types = kind, nil
		case records.PresenceWorker:
			p.Kind, p.Domains = kind, nil
		default:
			return
		}
		out = append(out, p)
	})
	if err != nil {
		return nil, err
	}
	slices.SortFunc(out, func(a, b records.Presence) int { return a.Since.Compare(b.Since) })
	return out, nil
}
