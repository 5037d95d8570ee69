package mqtt

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"

	"fieldlink/internal/testtool"
	"fieldlink/uplink"
	"fieldlink/uplink/internal/httpc"

	"github.com/eclipse/paho.mqtt.golang/packets"
)

// The errors a technician meets, in words.
func TestExplain(t *testing.T) {
	addr := testtool.RefusedAddr(t) // nothing listens there
	var d net.Dialer
	_, refused := d.DialContext(context.Background(), "tcp", addr)
	for _, c := range []struct {
		err  error
		want string
	}{
		{fmt.Errorf("connect: %w", refused), "connection refused: nothing listens at " + addr},
		{fmt.Errorf("connect: %w", packets.ErrorRefusedBadUsernameOrPassword), "refuses the user name or password"},
		{&httpc.Error{Method: "POST", URL: "http://x/ingest", StatusCode: 401, Status: "401 Unauthorized"}, "refuses the credentials: 401 Unauthorized"},
		{fmt.Errorf("%w (fieldlink-gw-1): …", ErrClientIDInUse), "another client uses this gateway's MQTT client id (fieldlink-gw-1)"},
		{errors.New("something else"), "something else"},
	} {
		if got := uplink.Explain(c.err); !strings.Contains(got, c.want) {
			t.Errorf("Explain(%v) = %q, want it to say %q", c.err, got, c.want)
		}
	}
}
