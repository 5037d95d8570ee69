package mqtt

import (
	"strings"
	"testing"
	"time"
)

func TestMQTTNewConfig(t *testing.T) {
	tests := []struct {
		name    string
		cfg     mqttConfig
		wantErr string // substring; "" means success
		check   func(t *testing.T, m *mqttUpstream)
	}{
		{name: "defaults", cfg: mqttConfig{URL: "mqtt://broker.example"}, check: func(t *testing.T, m *mqttUpstream) {
			if m.addr != "broker.example:1883" || m.Name() != "mqtt://broker.example:1883" {
				t.Errorf("addr %q name %q", m.addr, m.Name())
			}
			if m.qos != 1 || m.window() != 64 || m.status != "fieldlink/s1/gw1/status" {
				t.Errorf("qos %d window %d status %q", m.qos, m.window(), m.status)
			}
			if !strings.HasPrefix(m.cfg.ClientID, "fieldlink-gw1-") {
				t.Errorf("client id %q", m.cfg.ClientID)
			}
			if m.cfg.KeepAlive != 30*time.Second || m.cfg.ConnectTimeout != 5*time.Second || m.cfg.PublishTimeout != 10*time.Second {
				t.Errorf("timeouts %v %v %v", m.cfg.KeepAlive, m.cfg.ConnectTimeout, m.cfg.PublishTimeout)
			}
		}},
		{name: "mqtts default port", cfg: mqttConfig{URL: "mqtts://broker.example"}, check: func(t *testing.T, m *mqttUpstream) {
			if m.addr != "broker.example:8883" || !m.useTLS || m.tlsConfig == nil || m.tlsConfig.InsecureSkipVerify {
				t.Errorf("addr %q tls %v", m.addr, m.useTLS)
			}
		}},
		{name: "ipv6 and port", cfg: mqttConfig{URL: "mqtt://[::1]:1999/"}, check: func(t *testing.T, m *mqttUpstream) {
			if m.addr != "[::1]:1999" {
				t.Errorf("addr %q", m.addr)
			}
		}},
		{name: "qos 0 means the default 1", cfg: mqttConfig{URL: "mqtt://h", QoS: 0}, check: func(t *testing.T, m *mqttUpstream) {
			if m.qos != 1 {
				t.Errorf("qos %d", m.qos)
			}
		}},
		{name: "at most once", cfg: mqttConfig{URL: "mqtt://h", AtMostOnce: true}, check: func(t *testing.T, m *mqttUpstream) {
			if m.qos != 0 {
				t.Errorf("qos %d", m.qos)
			}
		}},
		{name: "explicit client id and window", cfg: mqttConfig{URL: "mqtt://h", ClientID: "me", Window: 7}, check: func(t *testing.T, m *mqttUpstream) {
			if m.cfg.ClientID != "me" || m.window() != 7 {
				t.Errorf("client id %q window %d", m.cfg.ClientID, m.window())
			}
		}},
		{name: "tcp alias refused", cfg: mqttConfig{URL: "tcp://h:1883"}, wantErr: "write mqtt://"},
		{name: "ssl alias refused", cfg: mqttConfig{URL: "ssl://h:8883"}, wantErr: "write mqtts://"},
		{name: "ws refused", cfg: mqttConfig{URL: "ws://h"}, wantErr: "not supported"},
		{name: "no scheme", cfg: mqttConfig{URL: "h:1883"}, wantErr: "must start with"},
		{name: "credentials in URL", cfg: mqttConfig{URL: "mqtt://u:hunter2@h:1883"}, wantErr: "password_file"},
		{name: "path", cfg: mqttConfig{URL: "mqtt://h/x"}, wantErr: "no path"},
		{name: "bad port", cfg: mqttConfig{URL: "mqtt://h:99999"}, wantErr: "port"},
		{name: "qos 2", cfg: mqttConfig{URL: "mqtt://h", QoS: 2}, wantErr: "qos 2"},
		{name: "window negative", cfg: mqttConfig{URL: "mqtt://h", Window: -1}, wantErr: "window"},
		{name: "window too big", cfg: mqttConfig{URL: "mqtt://h", Window: 70000}, wantErr: "window"},
		{name: "topic var unknown", cfg: mqttConfig{URL: "mqtt://h", Topic: "a/{farm}/{data_type}"}, wantErr: "{farm}"},
		{name: "topic wildcard", cfg: mqttConfig{URL: "mqtt://h", Topic: "a/+/{data_type}"}, wantErr: "'+'"},
		{name: "topic brace", cfg: mqttConfig{URL: "mqtt://h", Topic: "a/{data_type"}, wantErr: "without '}'"},
		{name: "status needs vars", cfg: mqttConfig{URL: "mqtt://h", Topic: "t/{data_type}", StatusTopic: "st/{farm}", ClientID: "c"}, wantErr: "{farm}"},
		{name: "onload without topic", cfg: mqttConfig{URL: "mqtt://h", OnLoad: func([]byte) {}}, wantErr: "LoadTopic"},
		{name: "keepalive too short", cfg: mqttConfig{URL: "mqtt://h", KeepAlive: time.Millisecond}, wantErr: "keep-alive"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.cfg.Vars == nil {
				tt.cfg.Vars = mqttVars
			}
			m, err := newMQTT(tt.cfg)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, tt.wantErr)
				}
				if strings.Contains(err.Error(), "hunter2") {
					t.Fatalf("error shows the password: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tt.check(t, m)
		})
	}
	t.Run("no gateway for the default client id", func(t *testing.T) {
		_, err := newMQTT(mqttConfig{URL: "mqtt://h", Topic: "t/{data_type}", StatusTopic: "st"})
		if err == nil || !strings.Contains(err.Error(), "client id") {
			t.Fatalf("err = %v", err)
		}
	})
}
