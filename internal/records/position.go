package records

// TokenPosition says where a token stands against its batch's progress.
type TokenPosition int

// Token positions.
const (
	// TokenLive carries the progress's generation and step: the batch's
	// one token that may run.
	TokenLive TokenPosition = iota
	// TokenBehind is superseded (a rotation's predecessor, a moved batch's
	// old position, a second copy): dropped wherever it is met.
	TokenBehind
	// TokenAhead is ahead of the record, which only a processor or the
	// owner's edit moves, both writing progress first: an edit half done,
	// or a record lost or tampered with.
	TokenAhead
)

// Position compares tok with the generation and step of p. Generations
// order first: the owner's edit bumps it, and resets nothing.
func (p *Progress) Position(tok Token) TokenPosition {
	switch {
	case tok.Gen == p.Gen && tok.Rotation == p.Rotation:
		return TokenLive
	case tok.Gen < p.Gen || (tok.Gen == p.Gen && tok.Rotation < p.Rotation):
		return TokenBehind
	}
	return TokenAhead
}

// Live reports whether tok is the batch's live token: the batch is not
// finished and tok is at its current generation and step.
func (p *Progress) Live(tok Token) bool {
	return p.State != Done && p.Position(tok) == TokenLive
}
