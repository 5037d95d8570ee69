package status

import (
	"encoding/json"
	"fmt"
	"html"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"fieldlink/selector"
	"fieldlink/sensors"
	uplinkmqtt "fieldlink/uplink/mqtt"
)

// page is the page of f at now, and its snapshot's JSON.
func page(t *testing.T, f *fake, now time.Time) (html, js string) {
	t.Helper()
	s := server(f, &now)
	snap := s.Snapshot()
	b, err := json.MarshalIndent(snap, "", " ")
	if err != nil {
		t.Fatal(err)
	}
	return string(renderPage(snap, view{})), string(b)
}

// index is where want is in page, failing the test when it is not.
func index(t *testing.T, page, want string) int {
	t.Helper()
	i := strings.Index(page, want)
	if i < 0 {
		t.Fatalf("the page lacks %q", want)
	}
	return i
}

// A reload refused for errors in the file comes first, with its errors,
// and the page does not tell the technician to reload the file that was
// just refused.
func TestRefusedReloadAboveEverything(t *testing.T) {
	f := newFake()
	f.site.OnDiskSHA256 = strings.Repeat("cd", 32) // the refused file is on disk
	f.site.LastReload = &ReloadResult{At: t0.Add(-time.Minute), Err: "/etc/fieldlink/site.yaml:7:63: buses[0].devices[0].windw: unknown field"}
	html, js := page(t, f, t0)
	if a, s := index(t, html, "id=alerts"), index(t, html, "id=summary"); a > s {
		t.Errorf("the refused reload comes after the summary (alerts at %d, summary at %d)", a, s)
	}
	index(t, html, "windw: unknown field")
	if strings.Contains(html, "reload it (systemctl reload") {
		t.Error("the page tells the technician to reload the file whose reload was just refused")
	}
	if !strings.Contains(js, `"applied": false`) || !strings.Contains(js, `"error": "/etc/fieldlink/site.yaml:7:63: buses[0].devices[0].windw: unknown field"`) {
		t.Errorf("last_reload in the JSON:\n%s", js)
	}
}

// The only upstream down for 2 min with packets waiting: the headline
// says nothing was delivered, how many wait, and the upstream's last
// error in words; its row and the JSON have the error too.
func TestNothingDeliveredHeadline(t *testing.T) {
	f := newFake()
	f.devs, f.readings = f.devs[:1], f.readings[:1] // every device answers
	f.ups = []selector.Stats{{Name: "mqtt://one:1883"}}
	f.upErr["mqtt://one:1883"] = "connection refused: nothing listens at 10.0.0.5:1883"
	f.lastDelivered = t0.Add(-2 * time.Minute)
	f.buf.Normal, f.buf.Alarms, f.buf.OldestAt = 37, 0, t0.Add(-2*time.Minute)
	html, js := page(t, f, t0)
	want := "Nothing delivered for 2 min: 37 packets waiting; mqtt://one:1883: connection refused: nothing listens at 10.0.0.5:1883"
	if i, j := index(t, html, want), index(t, html, "devices answer"); i > j {
		t.Errorf("the stall comes after the device summary")
	}
	if i := index(t, html, want); !strings.Contains(html[max(0, i-80):i], "stall") {
		t.Errorf("the stall is not marked as one (red): %s", html[max(0, i-80):i])
	}
	row := html[index(t, html, `data-upstream="mqtt://one:1883"`):]
	row = row[:strings.Index(row, "</table>")]
	if strings.Contains(row, ">none<") || !strings.Contains(row, "connection refused") {
		t.Errorf("the upstream's row: %s", row)
	}
	for _, w := range []string{`"last_error": "connection refused: nothing listens at 10.0.0.5:1883"`, `"last_error_at": "2026-11-30T07:59:55Z"`, `"nothing_delivered_s": 120`} {
		if !strings.Contains(js, w) {
			t.Errorf("the JSON lacks %s", w)
		}
	}

	// Delivered a moment ago, or nothing waiting for long: no stall.
	f.lastDelivered = t0.Add(-time.Second)
	if html, js := page(t, f, t0); strings.Contains(html, "Nothing delivered") || !strings.Contains(js, `"nothing_delivered_s": null`) {
		t.Errorf("a stall shown right after a delivery")
	}
	f.lastDelivered, f.buf.OldestAt = t0.Add(-2*time.Minute), t0.Add(-time.Second)
	if html, _ := page(t, f, t0); strings.Contains(html, "Nothing delivered") {
		t.Errorf("a stall shown for a packet that waits for a second")
	}
	// An upstream with no error: null, never "".
	f.upErr = map[string]string{}
	if _, js := page(t, f, t0); !strings.Contains(js, `"last_error": null`) {
		t.Errorf("an upstream without error:\n%s", js)
	}
}

// The only bus down, every device refused the same way: the cause is said
// once, at the bus, in words; the headline's badge says down.
func TestBusDownCauseOnce(t *testing.T) {
	f := newFake()
	// The error as the Modbus client returns it: the dial's, wrapped.
	dial := &net.OpError{Op: "dial", Net: "tcp", Addr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 5020},
		Err: &os.SyscallError{Syscall: "connect", Err: syscall.ECONNREFUSED}}
	refused := func(dev string, slave int) sensors.DeviceStatus {
		err := fmt.Errorf("device %s (slave %d on bus a): read holding 0+1: modbus: slave %d, read holding registers (fc 3) addr 0 qty 1: %w", dev, slave, slave, dial)
		return sensors.DeviceStatus{Name: dev, Bus: "a", Health: sensors.Offline, Polls: 10, Errors: 7, ConsecutiveFailures: 7,
			LastError: err.Error(), Failure: sensors.FailureOf(err)}
	}
	f.devs = []sensors.DeviceStatus{refused("ch4-1", 1), refused("co-1", 2)}
	f.readings = f.readings[:2]
	html, js := page(t, f, t0)
	if n := strings.Count(html, "refuses connections"); n != 1 {
		t.Errorf("the cause shows %d times, want once", n)
	}
	if strings.Contains(html, "read holding registers") {
		t.Error("the page shows the developer's error string")
	}
	if i, j := index(t, html, "refuses connections"), index(t, html, `data-device="ch4-1"`); i > j {
		t.Error("the cause is not at the bus, before its devices")
	}
	sum := html[index(t, html, "id=summary"):]
	sum = sum[:strings.Index(sum, "</section>")]
	if !strings.Contains(sum, `class="pill down"`) || strings.Contains(sum, "degraded") {
		t.Errorf("no device answers, the headline says: %s", sum)
	}
	if !strings.Contains(js, `"cause": "127.0.0.1:5020 refuses connections`) {
		t.Errorf("the bus's cause in the JSON:\n%s", js)
	}
}

// The buffer box never shows the age of a packet it does not count as
// waiting (one acknowledged, its deletion pending).
func TestBufferBoxConsistent(t *testing.T) {
	f := newFake()
	f.buf.Normal, f.buf.Alarms, f.buf.OldestSeq, f.buf.OldestAt = 0, 0, 5, t0.Add(-time.Second)
	html, js := page(t, f, t0)
	box := html[index(t, html, "id=buffer"):]
	box = box[:strings.Index(box, "</section>")]
	if strings.Contains(box, " old<") || !strings.Contains(box, "0 packets") {
		t.Errorf("an empty buffer's box: %s", box)
	}
	if !strings.Contains(js, `"oldest_age_s": null`) {
		t.Error("oldest_age_s of an empty buffer is not null")
	}
}

// Every time on the page says its zone: the page is in the site's time,
// the logs in UTC.
func TestTimesShowZone(t *testing.T) {
	f := newFake()
	loc, err := time.LoadLocation("Asia/Shanghai")
	if err != nil {
		t.Fatal(err)
	}
	f.site.Location = loc
	html, _ := page(t, f, t0)
	n := strings.Count(html, "<time ")
	if z := strings.Count(html, " UTC+8</time>"); n == 0 || z != n {
		t.Errorf("%d of %d times say their zone (UTC+8)", z, n)
	}
	if !strings.Contains(html, "16:00:00 UTC+8") {
		t.Error("the page's time is not in the site's zone")
	}
}

// A downlink that runs commands unsigned says so in its box and among
// the warnings above everything.
func TestDownlinkUnsignedWarned(t *testing.T) {
	f := newFake()
	f.downlink = &DownlinkStatus{Enabled: true, Unsigned: true}
	html, js := page(t, f, t0)
	const words = "commands run unsigned: anyone who can publish on the broker can write to the devices"
	if n := strings.Count(html, words); n != 2 {
		t.Errorf("the warning shows %d times, want 2 (warnings, downlink box)", n)
	}
	if a, s := index(t, html, "id=alerts"), index(t, html, "id=summary"); a > s || !strings.Contains(html[a:s], words) {
		t.Error("the unsigned downlink is not among the warnings above everything")
	}
	if !strings.Contains(js, `"unsigned": true`) {
		t.Error("the JSON's downlink lacks unsigned")
	}
}

// An upstream whose client id another client uses: among the warnings
// above everything while it lasts, not once it is old.
func TestClientIDInUseWarned(t *testing.T) {
	f := newFake()
	words := uplinkmqtt.ErrClientIDInUse.Error() + " (fieldlink-gw-1-1): the broker drops each connection as the other connects"
	f.upErr["mqtt://one:1883"] = words
	pg, _ := page(t, f, t0)
	if a, s := index(t, pg, "id=alerts"), index(t, pg, "id=summary"); a > s || !strings.Contains(pg[a:s], html.EscapeString("mqtt://one:1883: "+words)) {
		t.Errorf("the client id in use is not among the warnings:\n%s", pg)
	}
	if pg, _ := page(t, f, t0.Add(time.Hour)); strings.Contains(pg, "id=alerts") {
		t.Error("an hour-old client id error is still among the warnings")
	}
}
