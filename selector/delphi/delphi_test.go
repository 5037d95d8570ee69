package delphi

import (
	"errors"
	"fieldlink/selector"
	"math"
	"strings"
	"testing"
)

// delphiRound1 is a first round in which the two experts disagree: e2
// rates s1 (both factors) and s2's in_flight four times e1, a coefficient
// of variation |a − 4a|/(a + 4a) = 0.6 > 0.5 on all three parts of those
// three items: 9 of 18 parts, 50% > 40%, so another round is needed.
//
// PERT (lowest + 4·most likely + highest)/6, e1: s1 in_flight
// (10 + 80 + 30)/6 = 20, latency (40 + 280 + 100)/6 = 70; s2 in_flight
// (20 + 160 + 60)/6 = 40, latency (10 + 120 + 50)/6 = 30; upload in_flight
// (1 + 8 + 3)/6 = 2, latency (5 + 40 + 15)/6 = 10. e2: 80, 280, 160, 30, 2, 10.
const delphiRound1 = `expert,round,target,factor,lowest,highest,most_likely
e1,1,server:s1,in_flight,10,30,20
e1,1,server:s1,latency,40,100,70
e1,1,server:s2,in_flight,20,60,40
e1,1,server:s2,latency,10,50,30
e1,1,service:upload,in_flight,1,3,2
e1,1,service:upload,latency,5,15,10
e2,1,server:s1,in_flight,40,120,80
e2,1,server:s1,latency,160,400,280
e2,1,server:s2,in_flight,80,240,160
e2,1,server:s2,latency,10,50,30
e2,1,service:upload,in_flight,1,3,2
e2,1,service:upload,latency,5,15,10
`

// delphiRound2 is the second round: e2 now rates s1's in_flight
// 20, 40, 30 (PERT (20 + 120 + 40)/6 = 30) and the rest as e1; the largest
// CV is lowest's 10 vs 20, 5/15 = 0.33: consensus.
//
// Mean over both experts and both rounds:
//
//	s1 in_flight (20 + 80 + 20 + 30)/4 = 37.5, latency (70 + 280 + 70 + 70)/4 = 122.5
//	s2 in_flight (40 + 160 + 40 + 40)/4 = 70,  latency 30
//	TR: in_flight 107.5, latency 152.5; N (upload): in_flight 2, latency 10
//
// so the dominant factor is latency (10/152.5 = 0.066 > 2/107.5 = 0.019).
const delphiRound2 = `e1,2,server:s1,in_flight,10,30,20
e1,2,server:s1,latency,40,100,70
e1,2,server:s2,in_flight,20,60,40
e1,2,server:s2,latency,10,50,30
e1,2,service:upload,in_flight,1,3,2
e1,2,service:upload,latency,5,15,10
e2,2,server:s1,in_flight,20,40,30
e2,2,server:s1,latency,40,100,70
e2,2,server:s2,in_flight,20,60,40
e2,2,server:s2,latency,10,50,30
e2,2,service:upload,in_flight,1,3,2
e2,2,service:upload,latency,5,15,10
`

const delphiYAML = `# Delphi (docs/algorithms.md § 000): 2 experts asked, 2 rounds; PERT (lowest + 4·most likely + highest)/6,
# mean over the experts who answered every item in the valid rounds.
# round 1: 2/2 answered every item (100% ≥ 90%), CV > 0.5 on 9 of 18 items (50% > 40%): valid, no consensus
# round 2: 2/2 answered every item (100% ≥ 90%), CV > 0.5 on 0 of 18 items (0% ≤ 40%): valid
# server s1: {failures: 0, in_flight: 37.5, consecutive_failures: 0, rt_stddev: 0, latency: 122.5}
# server s2: {failures: 0, in_flight: 70, consecutive_failures: 0, rt_stddev: 0, latency: 30}
uplink:
  selector: drf
  drf:
    tr: {failures: 0, in_flight: 107.5, consecutive_failures: 0, rt_stddev: 0, latency: 152.5}
    n: {failures: 0, in_flight: 2, consecutive_failures: 0, rt_stddev: 0, latency: 10} # service upload
`

func TestDelphiTwoRounds(t *testing.T) {
	res, err := Read(strings.NewReader(delphiRound1+delphiRound2), 2)
	if err != nil {
		t.Fatal(err)
	}
	want := Result{
		Asked: 2,
		Rounds: []Round{
			{Round: 1, Experts: 2, Answered: 2, ResponseRate: 1, Items: 18, Disagreeing: 9, Valid: true, Consensus: false},
			{Round: 2, Experts: 2, Answered: 2, ResponseRate: 1, Items: 18, Disagreeing: 0, Valid: true, Consensus: true},
		},
		Servers: []Estimate{
			{"s1", selector.DRFFactors{InFlight: 37.5, Latency: 122.5}},
			{"s2", selector.DRFFactors{InFlight: 70, Latency: 30}},
		},
		Services: []Estimate{{"upload", selector.DRFFactors{InFlight: 2, Latency: 10}}},
		TR:       selector.DRFFactors{InFlight: 107.5, Latency: 152.5},
	}
	if !delphiEqual(res, want) {
		t.Fatalf("got  %+v\nwant %+v", res, want)
	}
	if got := string(res.YAML()); got != delphiYAML {
		t.Fatalf("YAML:\n%s\nwant:\n%s", got, delphiYAML)
	}
	opt := selector.DRFOptions{TR: res.TR, N: res.Services[0].Factors}
	if err := opt.Validate(); err != nil {
		t.Fatal(err)
	}
	// drf's weights from these amounts: selector's TestDRFWeightsFromDelphi.
}

func delphiEqual(a, b Result) bool {
	if a.Asked != b.Asked || a.TR != b.TR || a.Failed != b.Failed || len(a.Rounds) != len(b.Rounds) ||
		len(a.Servers) != len(b.Servers) || len(a.Services) != len(b.Services) {
		return false
	}
	for k := range a.Rounds {
		if a.Rounds[k] != b.Rounds[k] {
			return false
		}
	}
	for k := range a.Servers {
		if a.Servers[k] != b.Servers[k] {
			return false
		}
	}
	for k := range a.Services {
		if a.Services[k] != b.Services[k] {
			return false
		}
	}
	return true
}

func TestDelphiChecks(t *testing.T) {
	// Round 2 with one of e2's rows missing: 1 of 2 answered every item.
	var partial []string
	for _, l := range strings.Split(strings.TrimSpace(delphiRound2), "\n") {
		if !strings.HasPrefix(l, "e2,2,server:s2,latency") {
			partial = append(partial, l)
		}
	}
	for _, tc := range []struct {
		name     string
		csv      string
		asked    int
		err      error
		failed   string
		servers  int
		s1Flight float64
		yaml     string
	}{
		{
			name: "no consensus after round 1", csv: delphiRound1, asked: 2, err: ErrConsensus,
			failed:  "round 1: CV > 0.5 on 9 of 18 items = 50% > 40%: send the results back for another round",
			servers: 2, s1Flight: 50, // (20 + 80)/2
			yaml: "# NOT READY: round 1: CV > 0.5 on 9 of 18 items",
		},
		{
			name: "round 2 response rate 50%", csv: delphiRound1 + strings.Join(partial, "\n") + "\n", asked: 2, err: ErrResponseRate,
			failed:  "round 2: response rate 1/2 = 50% < 90%: the round is invalid, run it again",
			servers: 2, s1Flight: 50, // round 2 ignored
			yaml: "# round 2: 1/2 answered every item (50% < 90%), CV > 0.5 on 0 of 18 items (0% ≤ 40%): INVALID (ignored)",
		},
		{
			name: "three asked, two answered", csv: delphiRound1 + delphiRound2, asked: 3, err: ErrResponseRate,
			failed:  "round 2: response rate 2/3 = 66.7% < 90%: the round is invalid, run it again",
			servers: 0, // no valid round
			yaml:    "# NOT READY: round 2: response rate 2/3 = 66.7% < 90%",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, err := Read(strings.NewReader(tc.csv), tc.asked)
			if !errors.Is(err, tc.err) || res.Failed != tc.failed {
				t.Fatalf("err %v, Failed %q; want %v, %q", err, res.Failed, tc.err, tc.failed)
			}
			if len(res.Servers) != tc.servers || tc.servers > 0 && res.Servers[0].Factors.InFlight != tc.s1Flight {
				t.Fatalf("servers %+v, want %d with s1 in_flight %v", res.Servers, tc.servers, tc.s1Flight)
			}
			if y := string(res.YAML()); !strings.Contains(y, tc.yaml) {
				t.Fatalf("YAML lacks %q:\n%s", tc.yaml, y)
			}
		})
	}
}

func TestDelphiErrorsNameTheLine(t *testing.T) {
	head := "expert,round,target,factor,lowest,highest,most_likely\ne1,1,server:s1,in_flight,10,30,20\n"
	for _, tc := range []struct {
		name, row, want string
		asked           int
	}{
		{"factor", "e1,1,server:s1,cpu,1,2,1", "line 3: factor must be one of failures, in_flight, consecutive_failures, rt_stddev, latency, got \"cpu\"", 2},
		{"target", "e1,1,s1,latency,1,2,1", "line 3: target must be server:NAME or service:NAME", 2},
		{"kind", "e1,1,host:s1,latency,1,2,1", "line 3: target must be server:NAME or service:NAME", 2},
		{"round", "e1,0,server:s1,latency,1,2,1", "line 3: round must be a whole number from 1", 2},
		{"number", "e1,1,server:s1,latency,1,x,1", "line 3: highest must be a number ≥ 0, got \"x\"", 2},
		{"negative", "e1,1,server:s1,latency,-1,2,1", "line 3: lowest must be a number ≥ 0", 2},
		{"order", "e1,1,server:s1,latency,5,9,2", "line 3: need lowest ≤ most_likely ≤ highest, got 5, 2, 9", 2},
		{"duplicate", "e1,1,server:s1,in_flight,10,30,20", "line 3: expert \"e1\" already answered server:s1 in_flight in round 1, on line 2", 2},
		{"expert", ",1,server:s1,latency,1,2,1", "line 3: expert is empty", 2},
		{"fields", "e1,1,server:s1,latency,1,2", "record on line 3: wrong number of fields", 2},
		{"demand without resource", "e1,1,service:up,latency,1,2,1", "line 3: service \"up\" needs latency but no server has an amount of it", 2},
		{"more experts than asked", "e2,1,server:s1,in_flight,10,30,20", "round 1 has answers from 2 experts, more than the 1 asked", 1},
		{"asked", "", "experts asked must be at least 1, got 0", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Read(strings.NewReader(head+tc.row+"\n"), tc.asked)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want it to contain %q", err, tc.want)
			}
		})
	}
	if _, err := Read(strings.NewReader("expert,round,target,factor,lowest,highest,most_likely\n"), 2); err == nil {
		t.Fatal("no answers: no error")
	}
}

func TestDelphiCV(t *testing.T) {
	for _, c := range []struct {
		vs   []float64
		want float64
	}{
		{nil, 0},
		{[]float64{5}, 0},
		{[]float64{0, 0}, 0},
		{[]float64{10, 40}, 0.6},                 // σ 15, μ 25
		{[]float64{2, 4, 4, 4, 5, 5, 7, 9}, 0.4}, // σ 2, μ 5
	} {
		if got := cv(c.vs); math.Abs(got-c.want) > 1e-12 {
			t.Errorf("CV%v = %v, want %v", c.vs, got, c.want)
		}
	}
}
