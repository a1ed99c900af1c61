package client

// HoldSendSlots takes every send slot of c, as requests in flight would,
// so that the plain Sends that follow wait; release hands the slots back
// one by one, each to the Sends waiting then, as an answered request does.
func HoldSendSlots(c *Client) (release func()) {
	g := &c.groups
	g.mu.Lock()
	held := g.max - g.inFlight
	g.inFlight = g.max
	g.mu.Unlock()
	return func() {
		for range held {
			c.nextGroup(false)
		}
	}
}

// HoldSomeSendSlots takes n of c's free send slots, as requests in
// flight would; release hands them back one by one, as HoldSendSlots's
// does.
func HoldSomeSendSlots(c *Client, n int) (release func()) {
	g := &c.groups
	g.mu.Lock()
	g.inFlight += n
	g.mu.Unlock()
	return func() {
		for range n {
			c.nextGroup(false)
		}
	}
}

// SetLeadYield makes f what a Send that takes a slot while most are taken
// calls before it takes the Sends waiting, until restore.
func SetLeadYield(f func()) (restore func()) {
	old := leadYield
	leadYield = f
	return func() { leadYield = old }
}

// WaitingSends is how many Sends of c wait for a slot.
func WaitingSends(c *Client) int {
	c.groups.mu.Lock()
	defer c.groups.mu.Unlock()
	return len(c.groups.waiting)
}
