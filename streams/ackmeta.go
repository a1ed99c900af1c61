package streams

import (
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Delivery is what a consumed message's acknowledgement subject says of
// its delivery: the fields of jetstream.MsgMetadata read on every message
// of the hot path, without the allocation and the rest of the parse that
// Metadata does.
type Delivery struct {
	// Stream is the name of the message's stream.
	Stream string
	// NumDelivered counts this delivery: 1 for the first.
	NumDelivered uint64
	// StreamSeq is the message's sequence in its stream.
	StreamSeq uint64
	// Timestamp is when the message was stored.
	Timestamp time.Time
}

// DeliveryOf reads the Delivery of a consumed message from its reply, the
// acknowledgement subject, in either of the server's two forms:
//
//	$JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.<cseq>.<tm>.<pending>
//	$JS.ACK.<domain>.<hash>.<stream>.<consumer>.<delivered>.<sseq>.<cseq>.<tm>.<pending>[.<token>…]
//
// It gives what the message's Metadata gives, field for field (a number
// that is not one reads as 0, as there), and refuses what Metadata
// refuses: an empty reply (an error matching jetstream.ErrMsgNoReply), and
// one that is not an acknowledgement subject (jetstream.ErrNotJSMessage).
func DeliveryOf(reply string) (Delivery, error) {
	if reply == "" {
		return Delivery{}, jetstream.ErrMsgNoReply
	}
	rest, ok := strings.CutPrefix(reply, "$JS.ACK.")
	if !ok {
		return Delivery{}, jetstream.ErrNotJSMessage
	}
	// Tokens after "$JS.ACK.": 7 in the first form, 9 or more in the second.
	switch n := strings.Count(rest, ".") + 1; {
	case n == 7:
	case n >= 9:
		_, rest, _ = strings.Cut(rest, ".") // the domain
		_, rest, _ = strings.Cut(rest, ".") // the account's hash
	default:
		return Delivery{}, jetstream.ErrNotJSMessage
	}
	var tok [7]string // stream, consumer, delivered, sseq, cseq, tm, pending
	for i := range tok {
		tok[i], rest, _ = strings.Cut(rest, ".")
	}
	return Delivery{Stream: tok[0], NumDelivered: parseNum(tok[2]), StreamSeq: parseNum(tok[3]),
		Timestamp: time.Unix(0, int64(parseNum(tok[5])))}, nil
}

// parseNum reads a decimal; anything but digits reads as 0.
func parseNum(s string) (n uint64) {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0
		}
		n = n*10 + uint64(c-'0')
	}
	return n
}
