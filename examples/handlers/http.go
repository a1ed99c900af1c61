package handlers

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"syscall"
	"time"

	"github.com/tickflow/tickflow/pipeline"
)

// HTTPRequest is the payload of http.post.
type HTTPRequest struct {
	URL  string `msgpack:"url"`
	Body string `msgpack:"body"`
}

// HTTP posts a body to a URL. 5xx and transport errors are retryable; 4xx
// are permanent. The idempotency key goes in the Idempotency-Key header.
//
// A batch's submitter chooses the URL, so the handler connects only where
// its configuration lets it: public unicast addresses, and what NewHTTP's
// allow list opens. Loopback, link-local, private (RFC 1918, unique-local
// IPv6), shared (100.64.0.0/10), unspecified, broadcast and multicast
// addresses are refused (ErrDestination, permanent, code
// "http.destination"). The check is made on the address actually dialled,
// after name resolution, for every connection, redirects included, so a
// name that resolves to a refused address does not get around it; no
// proxy from the environment is used, since it would dial in our place.
type HTTP struct {
	client *http.Client
}

// NewHTTP returns the http.post handler. Each allow entry opens a
// destination otherwise refused: an IP prefix ("10.1.0.0/16"), an IP address
// ("127.0.0.1", any port) or an address and port ("127.0.0.1:8080", that
// port only). Host names are not accepted: what is checked is the address
// a name resolves to. A malformed entry is ErrAllowEntry.
func NewHTTP(allow ...string) (*HTTP, error) {
	var d destinations
	for _, e := range allow {
		if err := d.add(e); err != nil {
			return nil, err
		}
	}
	dialer := &net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second, Control: d.control}
	transport := &http.Transport{
		Proxy:                 nil,
		DialContext:           dialer.DialContext,
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          100,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ExpectContinueTimeout: time.Second,
	}
	return &HTTP{client: &http.Client{Timeout: 5 * time.Second, Transport: transport}}, nil
}

// Handle performs the request.
func (h *HTTP) Handle(ctx context.Context, call *pipeline.Call) (pipeline.Result, error) {
	var r HTTPRequest
	if err := call.Payload.Decode(&r); err != nil {
		return pipeline.Result{}, pipeline.Permanent(err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, r.URL, bytes.NewBufferString(r.Body))
	if err != nil {
		return pipeline.Result{}, pipeline.Permanent(err)
	}
	req.Header.Set("Idempotency-Key", call.IdempotencyKey())
	resp, err := h.client.Do(req)
	if errors.Is(err, ErrDestination) {
		return pipeline.Result{}, pipeline.Permanent(pipeline.WithCode("http.destination", err))
	}
	if err != nil {
		return pipeline.Result{}, pipeline.WithCode("http.transport", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	switch {
	case resp.StatusCode >= 500:
		return pipeline.Result{}, pipeline.WithCode("http.5xx", fmt.Errorf("handlers: POST %s: %s", r.URL, resp.Status))
	case resp.StatusCode >= 400:
		return pipeline.Result{}, pipeline.Permanent(pipeline.WithCode("http.4xx", fmt.Errorf("handlers: POST %s: %s", r.URL, resp.Status)))
	}
	return pipeline.Result{Data: pipeline.MustPayload(map[string]any{"status": resp.StatusCode, "body": string(body)})}, nil
}

// destinations are the addresses an allow list opens.
type destinations struct {
	prefixes []netip.Prefix
	exact    []netip.AddrPort
}

func (d *destinations) add(entry string) error {
	if strings.Contains(entry, "/") {
		p, err := netip.ParsePrefix(entry)
		if err != nil {
			return fmt.Errorf("%w %q: %w", ErrAllowEntry, entry, err)
		}
		d.prefixes = append(d.prefixes, p.Masked())
		return nil
	}
	if ap, err := netip.ParseAddrPort(entry); err == nil {
		d.exact = append(d.exact, netip.AddrPortFrom(ap.Addr().Unmap().WithZone(""), ap.Port()))
		return nil
	}
	if a, err := netip.ParseAddr(entry); err == nil {
		a = a.Unmap().WithZone("")
		d.prefixes = append(d.prefixes, netip.PrefixFrom(a, a.BitLen()))
		return nil
	}
	return fmt.Errorf("%w %q: expected an IP prefix (10.0.0.0/8), an IP address (127.0.0.1) or an address and port (127.0.0.1:8080)", ErrAllowEntry, entry)
}

// control is the dialer's check of every address it is about to connect
// to, after name resolution.
func (d *destinations) control(_, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("%w: %q is not an address and port", ErrDestination, address)
	}
	ip := ap.Addr().Unmap().WithZone("")
	if d.opens(netip.AddrPortFrom(ip, ap.Port())) {
		return nil
	}
	if rule := refused(ip); rule != "" {
		return fmt.Errorf("%w: %s is %s, which http.post reaches only when its allow list opens it", ErrDestination, ap, rule)
	}
	return nil
}

func (d *destinations) opens(ap netip.AddrPort) bool {
	for _, e := range d.exact {
		if e == ap {
			return true
		}
	}
	for _, p := range d.prefixes {
		if p.Contains(ap.Addr()) {
			return true
		}
	}
	return false
}

var (
	thisNetwork = netip.MustParsePrefix("0.0.0.0/8")
	shared      = netip.MustParsePrefix("100.64.0.0/10")
	broadcast   = netip.MustParseAddr("255.255.255.255")
)

// refused names the range that refuses ip by default, or "" for a public
// unicast address.
func refused(ip netip.Addr) string {
	switch {
	case ip.IsUnspecified() || thisNetwork.Contains(ip):
		return "unspecified (0.0.0.0/8, ::)"
	case ip.IsLoopback():
		return "loopback (127.0.0.0/8, ::1)"
	case ip.IsMulticast():
		return "multicast (224.0.0.0/4, ff00::/8)"
	case ip.IsLinkLocalUnicast():
		return "link-local (169.254.0.0/16, fe80::/10)"
	case ip.IsPrivate():
		return "private (10.0.0.0/8, 172.16.0.0/12, 192.168.0.0/16, fc00::/7)"
	case shared.Contains(ip):
		return "shared (100.64.0.0/10)"
	case ip == broadcast:
		return "broadcast (255.255.255.255)"
	}
	return ""
}
