package records

// WorkBatch asks a worker to run several atomic units, each exactly as a
// request on streams.WorkUnitSubject would run it: its own completion key, claim
// and record.
type WorkBatch struct {
	V     uint8         `msgpack:"v"`
	Units []WorkRequest `msgpack:"units"`
}

// WorkBatchReply answers a WorkBatch: one reply per unit, in its order.
type WorkBatchReply struct {
	V       uint8       `msgpack:"v"`
	Replies []WorkReply `msgpack:"replies"`
}

func (w *WorkBatch) version() uint8      { return w.V }
func (w *WorkBatch) setVersion()         { w.V = WireVersion }
func (w *WorkBatchReply) version() uint8 { return w.V }
func (w *WorkBatchReply) setVersion()    { w.V = WireVersion }
