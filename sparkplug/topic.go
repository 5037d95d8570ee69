package sparkplug

import (
	"fmt"
	"strings"
)

// Namespace is the first element of every Sparkplug B topic.
const Namespace = "spBv1.0"

// The message types of a topic.
const (
	NBIRTH = "NBIRTH"
	NDEATH = "NDEATH"
	DBIRTH = "DBIRTH"
	DDEATH = "DDEATH"
	NDATA  = "NDATA"
	DDATA  = "DDATA"
	NCMD   = "NCMD"
	DCMD   = "DCMD"
)

// Rebirth is the node control metric an NCMD sets to true to have the edge
// node publish its births again; bdSeq is the birth/death sequence metric
// of NBIRTH and NDEATH.
const (
	Rebirth = "Node Control/Rebirth"
	BdSeq   = "bdSeq"
)

// Topic is spBv1.0/group/msgType/node, with /device when device is not
// empty.
func Topic(group, msgType, node, device string) string {
	t := Namespace + "/" + group + "/" + msgType + "/" + node
	if device != "" {
		t += "/" + device
	}
	return t
}

// StateTopic is where a primary host application publishes its state:
// spBv1.0/STATE/host.
func StateTopic(host string) string { return Namespace + "/STATE/" + host }

// ParseTopic splits a node or device topic.
func ParseTopic(topic string) (group, msgType, node, device string, err error) {
	parts := strings.Split(topic, "/")
	if len(parts) < 4 || len(parts) > 5 || parts[0] != Namespace {
		return "", "", "", "", fmt.Errorf("sparkplug: %q is not a node or device topic", topic)
	}
	if len(parts) == 5 {
		device = parts[4]
	}
	return parts[1], parts[2], parts[3], device, nil
}

// CheckID reports whether s may be a group id, edge node id or device id:
// not empty, and none of '/', '+' or '#'.
func CheckID(s string) error {
	if s == "" || strings.ContainsAny(s, "/+#") {
		return fmt.Errorf("sparkplug: id %q must be non-empty and hold no '/', '+' or '#'", s)
	}
	return nil
}
