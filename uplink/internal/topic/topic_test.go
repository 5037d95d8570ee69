package topic

import (
	"strings"
	"testing"
)

func TestTemplate(t *testing.T) {
	vars := map[string]string{"site": "farm-7", "gateway": "gw1", "slash": "a/b", "data_type": "ignored"}
	tests := []struct {
		tmpl    string
		pub     map[string]string
		want    string
		wantErr string // from bind or render
	}{
		{"fieldlink/{site}/{gateway}/{data_type}", map[string]string{"data_type": "rain"}, "fieldlink/farm-7/gw1/rain", ""},
		{"x/{site}/{device}/{data_type}", map[string]string{"data_type": "gas", "device": "ch4-1"}, "x/farm-7/ch4-1/gas", ""},
		{"{data_type}", map[string]string{"data_type": "a"}, "a", ""},
		{"plain/topic", nil, "plain/topic", ""},
		{"t/{site}", map[string]string{"site": "not-per-packet"}, "t/farm-7", ""},
		{"t/{device}", map[string]string{"data_type": "x"}, "", "{device} has no value in the packet"},
		{"t/{device}", map[string]string{"device": ""}, "", "{device} has no value"},
		{"t/{device}", map[string]string{"device": "a/b"}, "", "not allowed"},
		{"t/{device}", map[string]string{"device": "a+"}, "", "not allowed"},
		{"t/{device}", map[string]string{"device": "#"}, "", "not allowed"},
		{"t/{farm}", nil, "", "{farm} has no value in vars"},
		{"t/{slash}", nil, "", "not allowed"},
	}
	for _, tt := range tests {
		tp, err := Parse(tt.tmpl)
		if err != nil {
			t.Fatalf("%q: %v", tt.tmpl, err)
		}
		tp, err = tp.Bind(vars, "data_type", "device")
		got := ""
		if err == nil {
			got, err = tp.Render(tt.pub)
		}
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("%q %v: err = %v, want %q", tt.tmpl, tt.pub, err, tt.wantErr)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("%q %v = %q, %v; want %q", tt.tmpl, tt.pub, got, err, tt.want)
		}
	}
	for _, bad := range []string{"", "a/{}", "a/}", "a/{b{c}}", "a/#", "a\x00"} {
		if _, err := Parse(bad); err == nil {
			t.Errorf("template %q accepted", bad)
		}
	}
}

func BenchmarkTopic(b *testing.B) {
	tp, err := Parse("fieldlink/{site}/{gateway}/{data_type}")
	if err == nil {
		tp, err = tp.Bind(map[string]string{"site": "s1", "gateway": "gw1"}, "data_type", "device")
	}
	if err != nil {
		b.Fatal(err)
	}
	pv := map[string]string{"data_type": "gas", "device": "ch4-1"}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := tp.Render(pv); err != nil {
			b.Fatal(err)
		}
	}
}
