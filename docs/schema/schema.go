// Package schema holds the JSON Schemas of the packets a gateway delivers
// (packet.schema.json) and of its /status.json (status.schema.json), as
// docs/packets.md describes them, for the tests that validate every packet
// and status document they see against them.
package schema

import "embed"

// FS holds packet.schema.json and status.schema.json.
//
//go:embed packet.schema.json status.schema.json
var FS embed.FS
