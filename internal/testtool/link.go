package testtool

import (
	"io"
	"net"
	"sync"
	"testing"
	"time"
)

// Link is a TCP relay from a loopback port to a target (a broker, an
// ingest server) that the test can take down: an outage of the network
// between the gateway and its upstream, while the upstream itself stays
// up. Down, it closes every relayed connection and refuses new ones.
type Link struct {
	ln     net.Listener
	target string

	mu    sync.Mutex
	up    bool
	conns map[net.Conn]bool
	wg    sync.WaitGroup
}

// NewLink relays a new loopback port to target, up, until the test ends.
func NewLink(t testing.TB, target string) *Link {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	k := &Link{ln: ln, target: target, up: true, conns: map[net.Conn]bool{}}
	k.wg.Add(1)
	go k.accept()
	t.Cleanup(func() {
		ln.Close()
		k.Set(false)
		k.wg.Wait()
	})
	return k
}

// Addr is the relay's host:port.
func (k *Link) Addr() string { return k.ln.Addr().String() }

// Set takes the link up or down; down closes every relayed connection.
func (k *Link) Set(up bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.up = up
	if !up {
		for c := range k.conns {
			c.Close()
		}
	}
}

func (k *Link) accept() {
	defer k.wg.Done()
	for {
		c, err := k.ln.Accept()
		if err != nil {
			return
		}
		k.mu.Lock()
		up := k.up
		k.mu.Unlock()
		if !up {
			c.Close()
			continue
		}
		p, err := net.DialTimeout("tcp", k.target, 5*time.Second)
		if err != nil {
			c.Close()
			continue
		}
		k.mu.Lock()
		if !k.up {
			k.mu.Unlock()
			c.Close()
			p.Close()
			continue
		}
		k.conns[c], k.conns[p] = true, true
		k.mu.Unlock()
		k.wg.Add(2)
		go k.pipe(c, p)
		go k.pipe(p, c)
	}
}

func (k *Link) pipe(dst, src net.Conn) {
	defer k.wg.Done()
	_, _ = io.Copy(dst, src)
	dst.Close()
	src.Close()
	k.mu.Lock()
	delete(k.conns, dst)
	delete(k.conns, src)
	k.mu.Unlock()
}
