package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"

	"fieldlink/packet"
)

// headKeys is the DataHead the gateway writes for this site (no alarms in
// the footprint profile), in its order; the Node-RED flow must match it.
var headKeys = []string{"Date", "Time", "FarmId", "DataType", "GatewayId", "DeviceId", "Seq", "TS", "Epoch"}

// arrival is one packet as the broker's subscriber saw it.
type arrival struct {
	At      time.Time
	Device  string
	Seq     uint64
	Payload []byte
}

// ledger counts one system's packets and keeps the first problem of each
// kind; it is fed from the subscriber's goroutine.
type ledger struct {
	name, topic, gateway string
	devices              int
	regs                 []register
	// anyOrder accepts the DataHead and DataBody keys in any order:
	// Telegraf's JSON serializer writes the JSONata result through a Go
	// map, with its keys sorted.
	anyOrder bool

	mu       sync.Mutex
	got      []arrival
	last     []byte // the last good packet
	problems map[string]int
	examples []string
}

func newLedger(name, topic, gateway string, devices int, regs []register) *ledger {
	return &ledger{name: name, topic: topic, gateway: gateway, devices: devices, regs: regs, problems: map[string]int{}}
}

func (l *ledger) problem(kind, example string) {
	if l.problems[kind] == 0 && len(l.examples) < 5 {
		l.examples = append(l.examples, kind+": "+example)
	}
	l.problems[kind]++
}

// add checks and records one packet; qos is the QoS it arrived with on the
// QoS 1 subscription, 1 only if it was published at QoS 1 or more.
func (l *ledger) add(topic string, payload []byte, qos byte, at time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if qos != 1 {
		l.problem("not QoS 1", fmt.Sprintf("QoS %d on %s", qos, topic))
	}
	device := strings.TrimPrefix(topic, l.topic)
	a, err := checkPacket(payload, l.gateway, device, l.devices, l.regs, l.anyOrder)
	if err != nil {
		l.problem("bad packet", fmt.Sprintf("%v: %s", err, payload))
		return
	}
	a.At = at
	l.last, a.Payload = a.Payload, nil // only the last is shown: keep no more
	l.got = append(l.got, a)
}

// firstAt is when the first good packet arrived; zero if none has.
func (l *ledger) firstAt() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.got) == 0 {
		return time.Time{}
	}
	return l.got[0].At
}

// count is the number of distinct packets (GatewayId, Seq) that arrived in
// [from, to), the duplicates among them, and how many devices they came
// from.
func (l *ledger) count(from, to time.Time) (packets, dups, devices int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	seen := map[uint64]bool{}
	devs := map[string]bool{}
	for _, a := range l.got {
		if a.At.Before(from) || !a.At.Before(to) {
			continue
		}
		if seen[a.Seq] {
			dups++
			continue
		}
		seen[a.Seq] = true
		devs[a.Device] = true
		packets++
	}
	return packets, dups, len(devs)
}

// sample returns the payload of the last good packet, for the report.
func (l *ledger) sample() []byte {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.last
}

func (l *ledger) issues() (int, []string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, c := range l.problems {
		n += c
	}
	return n, slices.Clone(l.examples)
}

// checkPacket parses payload with the project's strict decoder and checks
// that it has the shape the gateway gives this site's packets: DataHead
// keys in order, the site, data type, gateway and device ids, Date and Time
// matching TS (the site is in UTC), and a DataBody of the device's
// registers in order, each a string with the profile's decimals. With
// anyOrder the keys of either object may come in any order.
func checkPacket(payload []byte, gateway, device string, devices int, registers []register, anyOrder bool) (arrival, error) {
	p, err := packet.Decode(payload)
	if err != nil {
		return arrival{}, err
	}
	var raw struct {
		DataHead, DataBody json.RawMessage
	}
	if err := json.Unmarshal(payload, &raw); err != nil {
		return arrival{}, err
	}
	head, err := objectKeys(raw.DataHead)
	if err != nil {
		return arrival{}, fmt.Errorf("DataHead: %w", err)
	}
	// A gateway whose clock is not synchronised marks its packets (see
	// docs/clock.md); the mark says nothing about the footprint.
	head = slices.DeleteFunc(head, func(k string) bool { return k == "ClockUnsynced" })
	want := headKeys
	if anyOrder {
		head, want = sorted(head), sorted(headKeys)
	}
	if !slices.Equal(head, want) {
		return arrival{}, fmt.Errorf("DataHead keys %v, want %v", head, want)
	}
	switch {
	case p.IDField != "FarmId" || p.SiteID != siteID:
		return arrival{}, fmt.Errorf("site %s %q, want FarmId %q", p.IDField, p.SiteID, siteID)
	case p.DataType != dataType:
		return arrival{}, fmt.Errorf("DataType %q, want %q", p.DataType, dataType)
	case p.GatewayID != gateway:
		return arrival{}, fmt.Errorf("GatewayId %q, want %q", p.GatewayID, gateway)
	case p.DeviceID != device:
		return arrival{}, fmt.Errorf("DeviceId %q on topic of device %q", p.DeviceID, device)
	case p.Loc != nil && p.Loc.String() != "UTC":
		return arrival{}, fmt.Errorf("date and time are not in UTC (%s)", p.Loc)
	}
	known := false
	for i := 1; i <= devices; i++ {
		known = known || device == deviceName(i)
	}
	if !known {
		return arrival{}, fmt.Errorf("unknown device %q", device)
	}
	if len(p.Fields) != len(registers) {
		return arrival{}, fmt.Errorf("DataBody has %d values, want %d", len(p.Fields), len(registers))
	}
	fields := p.Fields
	if anyOrder {
		byName := make(map[string]packet.Field, len(fields))
		for _, f := range fields {
			byName[f.Name] = f
		}
		fields = make([]packet.Field, len(registers))
		for i, r := range registers {
			fields[i] = byName[r.Name]
		}
	}
	for i, f := range fields {
		r := registers[i]
		if f.Name != r.Name {
			return arrival{}, fmt.Errorf("DataBody[%d] is %q, want %q", i, f.Name, r.Name)
		}
		if k := f.Value.Kind(); k != packet.KindString {
			return arrival{}, fmt.Errorf("DataBody.%s is a %s, want a string", f.Name, k)
		}
		s := f.Value.String()
		if d := decimals(s); d != r.Precision {
			return arrival{}, fmt.Errorf("DataBody.%s is %q: %d decimals, want %d", f.Name, s, d, r.Precision)
		}
	}
	return arrival{Device: device, Seq: p.Seq, Payload: payload}, nil
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}

// decimals is the number of digits after the point in a decimal string.
func decimals(s string) int {
	if _, frac, ok := strings.Cut(s, "."); ok {
		return len(frac)
	}
	return 0
}

// objectKeys returns the keys of a JSON object in document order.
func objectKeys(obj []byte) ([]string, error) {
	d := json.NewDecoder(bytes.NewReader(obj))
	if t, err := d.Token(); err != nil || t != json.Delim('{') {
		return nil, fmt.Errorf("not an object")
	}
	var keys []string
	for d.More() {
		t, err := d.Token()
		if err != nil {
			return nil, err
		}
		keys = append(keys, t.(string))
		var skip json.RawMessage
		if err := d.Decode(&skip); err != nil {
			return nil, err
		}
	}
	return keys, nil
}

// subscribe connects one QoS 1 subscriber to footprint/# on the broker and
// hands each packet to the ledger whose topic prefix it carries.
func subscribe(broker string, ledgers ...*ledger) (disconnect func(), err error) {
	o := mqtt.NewClientOptions().AddBroker("tcp://" + broker).SetClientID("footprint-counter").
		SetCleanSession(true).SetAutoReconnect(false).SetOrderMatters(true)
	c := mqtt.NewClient(o)
	if t := c.Connect(); !t.WaitTimeout(10*time.Second) || t.Error() != nil {
		return nil, fmt.Errorf("footprint: subscriber: connect to %s: %v", broker, t.Error())
	}
	handler := func(_ mqtt.Client, m mqtt.Message) {
		at := time.Now()
		for _, l := range ledgers {
			if strings.HasPrefix(m.Topic(), l.topic) {
				l.add(m.Topic(), slices.Clone(m.Payload()), m.Qos(), at)
				return
			}
		}
	}
	if t := c.Subscribe("footprint/#", 1, handler); !t.WaitTimeout(10*time.Second) || t.Error() != nil {
		c.Disconnect(0)
		return nil, fmt.Errorf("footprint: subscriber: subscribe: %v", t.Error())
	}
	return func() { c.Disconnect(250) }, nil
}
