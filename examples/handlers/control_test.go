package handlers

import (
	"errors"
	"strings"
	"testing"
)

// TestControl checks the dial-time decision for addresses a test cannot
// dial everywhere (IPv6 may be off): each refused range is named, public
// addresses pass, and allow entries open what they name.
func TestControl(t *testing.T) {
	var d destinations
	for _, e := range []string{"fd00:1::/32", "[fe80::2]:8080", "10.9.9.9"} {
		if err := d.add(e); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		address, rule string // rule "": allowed
	}{
		{address: "[::1]:80", rule: "loopback"},
		{address: "[::]:80", rule: "unspecified"},
		{address: "[fe80::1%eth0]:80", rule: "link-local"},
		{address: "[fd12::1]:80", rule: "private"},
		{address: "[ff02::1]:80", rule: "multicast"},
		{address: "255.255.255.255:80", rule: "broadcast"},
		{address: "0.1.2.3:80", rule: "unspecified"},
		{address: "172.16.0.1:80", rule: "private"},
		{address: "[2606:4700::1]:443"},
		{address: "93.184.215.14:443"},
		{address: "[fd00:1::7]:80"},
		{address: "[fe80::2%eth0]:8080"},
		{address: "[fe80::2]:8081", rule: "link-local"},
		{address: "10.9.9.9:1"},
		{address: "10.9.9.10:1", rule: "private"},
	}
	for _, tt := range tests {
		t.Run(tt.address, func(t *testing.T) {
			err := d.control("tcp", tt.address, nil)
			if tt.rule == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if !errors.Is(err, ErrDestination) || !strings.Contains(err.Error(), tt.rule) {
				t.Fatalf("err %v, want %v naming %q", err, ErrDestination, tt.rule)
			}
		})
	}
}
