package api

// The operations of authz: a request for operation Op of user U is sent to
// authz.U.Op (streams.AuthzSubject), its body the operation's request as
// JSON, and the answer is its reply as JSON, or an error reply (the
// codes). authz registers one endpoint per operation under these names,
// and the client sends to them.
const (
	// OpSend submits a batch under a label: SendRequest, SendReply.
	OpSend = "send"
	// OpSendMany submits up to MaxSendMany batches in one request, each as
	// OpSend would, in order: SendManyRequest, SendManyReply.
	OpSendMany = "send_many"
	// OpBatch reads a batch's record and progress: IDRequest, BatchReply.
	OpBatch = "batch"
	// OpConfirm confirms a function waiting for a confirmation:
	// ConfirmRequest, ConfirmReply.
	OpConfirm = "confirm"
	// OpQueue lists positions of a domain's queue (owner): QueueRequest,
	// QueueReply.
	OpQueue = "queue"
	// OpPause pauses a domain's processors (owner): DomainRequest,
	// StateReply.
	OpPause = "pause"
	// OpResume resumes a domain's processors (owner): DomainRequest,
	// StateReply.
	OpResume = "resume"
	// OpEvict removes the batch at a position (owner): PositionRequest,
	// EvictReply.
	OpEvict = "evict"
	// OpInsert inserts a batch at a position (owner): InsertRequest,
	// InsertReply.
	OpInsert = "insert"
	// OpDLQ lists dead letters (owner): DLQRequest, DLQReply.
	OpDLQ = "dlq"
	// OpReplay replays dead letters as new batches (owner):
	// ReplayRequest, ReplayReply.
	OpReplay = "replay"
	// OpPurge removes dead letters (owner): PurgeRequest, PurgeReply.
	OpPurge = "purge"
	// OpReload reloads the authorization table (owner): an empty request,
	// ReloadReply.
	OpReload = "reload"
	// OpKeys lists a domain's keys (owner): KeysRequest, KeysReply.
	OpKeys = "keys"
	// OpSenders lists a domain's senders (owner): SendersRequest,
	// SendersReply.
	OpSenders = "senders"
	// OpDomains lists every domain's queues and state (owner): an empty
	// request, DomainsReply.
	OpDomains = "domains"
	// OpInFlight lists a domain's unfinished batches (owner):
	// InFlightRequest, InFlightReply.
	OpInFlight = "inflight"
	// OpPresence lists the running processors and workers, and what
	// nothing running serves (owner): an empty request, PresenceReply.
	OpPresence = "presence"
	// OpList pages through the caller's own batches: ListRequest,
	// ListReply.
	OpList = "list"
	// OpCancel cancels one of the caller's own batches: IDRequest,
	// CancelReply.
	OpCancel = "cancel"
	// OpSchedules lists the table's schedules with their state (owner):
	// an empty request, SchedulesReply.
	OpSchedules = "schedules"
	// OpPauseSchedule pauses a schedule for every replica (owner):
	// ScheduleRequest, ScheduleInfo.
	OpPauseSchedule = "pause_schedule"
	// OpResumeSchedule resumes a schedule (owner): ScheduleRequest,
	// ScheduleInfo.
	OpResumeSchedule = "resume_schedule"
)
