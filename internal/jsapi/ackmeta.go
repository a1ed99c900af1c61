package jsapi

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
	_, tok, err := ackTokens(reply)
	if err != nil {
		return Delivery{}, err
	}
	return Delivery{Stream: tok[0], NumDelivered: parseNum(tok[2]), StreamSeq: parseNum(tok[3]),
		Timestamp: time.Unix(0, int64(parseNum(tok[5])))}, nil
}

// MetadataOf reads all of a consumed message's metadata from its reply,
// the acknowledgement subject, as jetstream's Metadata does.
func MetadataOf(reply string) (*jetstream.MsgMetadata, error) {
	domain, tok, err := ackTokens(reply)
	if err != nil {
		return nil, err
	}
	md := &jetstream.MsgMetadata{Domain: domain, Stream: tok[0], Consumer: tok[1],
		NumDelivered: parseNum(tok[2]), NumPending: parseNum(tok[6]),
		Timestamp: time.Unix(0, int64(parseNum(tok[5])))}
	md.Sequence.Stream, md.Sequence.Consumer = parseNum(tok[3]), parseNum(tok[4])
	return md, nil
}

// ackTokens splits an acknowledgement subject into its domain (empty in
// the first form) and its stream, consumer, delivered, stream sequence,
// consumer sequence, time and pending tokens.
func ackTokens(reply string) (domain string, tok [7]string, err error) {
	if reply == "" {
		return "", tok, jetstream.ErrMsgNoReply
	}
	rest, ok := strings.CutPrefix(reply, "$JS.ACK.")
	if !ok {
		return "", tok, jetstream.ErrNotJSMessage
	}
	// Tokens after "$JS.ACK.": 7 in the first form, 9 or more in the second.
	switch n := strings.Count(rest, ".") + 1; {
	case n == 7:
	case n >= 9:
		domain, rest, _ = strings.Cut(rest, ".")
		_, rest, _ = strings.Cut(rest, ".") // the account's hash
		if domain == "_" {
			domain = ""
		}
	default:
		return "", tok, jetstream.ErrNotJSMessage
	}
	for i := range tok {
		tok[i], rest, _ = strings.Cut(rest, ".")
	}
	return domain, tok, nil
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
