// Package dashboard is tickflow's web dashboard: every domain's queue depth
// per priority and pause state, the batches in flight by age, each batch's
// history, progress and outputs, the dead letter queue with replay, and a
// submitter's own batches. Its assets are embedded; it needs no CDN.
//
// Nothing is served without a login, and the dashboard holds no identity of
// its own: a user logs in with their nats.conf user and password, the
// dashboard opens a NATS connection as that user and makes every request
// through the authz client over it. authz decides what each user may see
// and do, exactly as for any other caller: the owner may pause, resume and
// replay, a submitter sees and cancels their own batches, and the dashboard
// cannot be used to do what the user could not do with the nats CLI.
//
// Sessions are random 256-bit tokens in an HttpOnly, SameSite=Strict cookie
// (Secure, and named with the __Host- prefix, behind an https PublicURL),
// bounded in number, per user, in idle time and in age; every POST must
// carry the session's CSRF token in a header and come from the dashboard's
// own origin; request bodies are bounded, and nothing a user typed is
// logged whole. Login attempts are bounded too, for each is a bcrypt check
// on the NATS server: a few at once, fewer from one client, so that one
// cannot take every place; and a client, or an account, whose logins keep
// failing must wait longer and longer, which a good login at another
// account does not clear.
//
// The dashboard answers only to the address a request reached it at and to
// localhost, at that port, and to the hosts of Config.PublicURL and
// Config.Hosts: any other Host, such as an attacker's name that resolves to
// the dashboard's address (DNS rebinding), is answered 421 before anything
// else.
package dashboard
