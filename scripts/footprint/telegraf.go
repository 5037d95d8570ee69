package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Telegraf as users build it for this job: a custom build of the module at
// telegrafVersion with only the plugins the job needs.
const (
	telegrafModule  = "github.com/influxdata/telegraf/cmd/telegraf"
	telegrafVersion = "v1.37.2"
	telegrafTags    = "custom,inputs.modbus,outputs.mqtt,serializers.json"
)

// installTelegraf makes sure cache holds the custom Telegraf build, running
// `go install` of telegrafModule@telegrafVersion with telegrafTags (the
// module proxy serves it) only when it is not there yet, and returns the
// binary's path. The directory name carries the version and the tags, so a
// change of either builds anew.
func installTelegraf(cache string, stdout *os.File) (string, error) {
	dir := filepath.Join(cache, "telegraf-"+telegrafVersion+"-"+strings.ReplaceAll(telegrafTags, ",", "+"))
	bin := filepath.Join(dir, "telegraf")
	if _, err := os.Stat(bin); err == nil {
		return bin, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	fmt.Fprintf(stdout, "building Telegraf %s (tags %s) into %s (go install, a few minutes the first time) ...\n", telegrafVersion, telegrafTags, dir)
	cmd := exec.Command("go", "install", "-tags", telegrafTags, "-trimpath", "-ldflags", "-s -w", telegrafModule+"@"+telegrafVersion)
	cmd.Dir = dir // outside the module: go install pkg@version ignores it anyway
	cmd.Env = append(os.Environ(), "GOBIN="+dir, "CGO_ENABLED=0", "GOFLAGS=")
	cmd.Stdout, cmd.Stderr = stdout, os.Stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("footprint: go install %s@%s: %w", telegrafModule, telegrafVersion, err)
	}
	return bin, nil
}

// telegrafConf is Telegraf's configuration for the step: one
// [[inputs.modbus]] on the emulator per devicesPerConn devices (one
// connection each, as the gateway's buses), one request per device (its
// registers with the profile's types and scales, measurement = DeviceId),
// flushed every interval to one [[outputs.mqtt]] at QoS 1, serialized by
// serializers.json with a JSONata json_transformation that writes the same
// DataHead/DataBody packet as the gateway: DataHead keys in order, the
// values as strings with the profile's decimals. Telegraf keeps no counter,
// so Seq is made of the reading time in milliseconds and the slave id:
// unique and increasing per gateway, as the platform needs.
func telegrafConf(emulators []string, broker string, devices int, regs []register, interval time.Duration, epoch string) string {
	var b strings.Builder
	fmt.Fprintf(&b, `[agent]
  interval = %q
  flush_interval = %q
  flush_jitter = "0s"
  collection_jitter = "0s"
  omit_hostname = true
  quiet = true
`, interval, interval)
	for i := 1; i <= devices; i++ {
		if (i-1)%devicesPerConn == 0 {
			fmt.Fprintf(&b, `
[[inputs.modbus]]
  name = "footprint-%d"
  controller = "tcp://%s"
  timeout = "1s"
  configuration_type = "request"
`, (i-1)/devicesPerConn+1, emulators[(i-1)/devicesPerConn])
		}
		fmt.Fprintf(&b, `
  [[inputs.modbus.request]]
    slave_id = %d
    byte_order = "ABCD"
    register = "holding"
    measurement = %q
    fields = [
`, i, deviceName(i))
		for a, r := range regs {
			typ := "UINT16"
			if r.Signed {
				typ = "INT16"
			}
			scale := strconv.FormatFloat(r.Scale, 'f', -1, 64)
			if !strings.Contains(scale, ".") {
				scale += ".0" // a TOML float: Telegraf refuses an integer
			}
			fmt.Fprintf(&b, "      { address=%d, name=%q, type=%q, scale=%s },\n", a, r.Name, typ, scale)
		}
		b.WriteString("    ]\n")
	}
	fmt.Fprintf(&b, `
[[outputs.mqtt]]
  servers = ["tcp://%s"]
  topic = '%s{{ .Name }}'
  qos = 1
  keep_alive = 30
  client_id = "footprint-telegraf"
  layout = "non-batch"
  data_format = "json"
  json_timestamp_units = "1ms"
  json_transformation = '''
%s'''
`, broker, telegrafTopic, jsonata(regs, epoch))
	return b.String()
}

// jsonata is the json_transformation: Telegraf's metric (name, tags,
// fields, timestamp in ms) to the packet.
func jsonata(regs []register, epoch string) string {
	var b strings.Builder
	pic := func(p string) string { return "$fromMillis(timestamp, " + strconv.Quote(p) + ")" }
	fmt.Fprintf(&b, `{
  "DataHead": {
    "Date": %s,
    "Time": %s,
    "FarmId": %q,
    "DataType": %q,
    "GatewayId": %q,
    "DeviceId": name,
    "Seq": timestamp * 1000 + $number(tags.slave_id),
    "TS": %s,
    "Epoch": %q
  },
  "DataBody": {
`, pic("[Y0001]-[M01]-[D01]"), pic("[H01]:[m01]:[s01]"), siteID, dataType, telegrafGateway,
		pic("[Y0001]-[M01]-[D01]T[H01]:[m01]:[s01]Z"), epoch)
	for i, r := range regs {
		format := "0"
		if r.Precision > 0 {
			format += "." + strings.Repeat("0", r.Precision)
		}
		sep := ","
		if i == len(regs)-1 {
			sep = ""
		}
		fmt.Fprintf(&b, "    %q: $formatNumber(fields.%s, %q)%s\n", r.Name, r.Name, format, sep)
	}
	b.WriteString("  }\n}\n")
	return b.String()
}
