// Package delphi is the expert step of the drf selector (docs/algorithms.md
// § 000): experts' estimates, read from CSV over one or more rounds, checked
// for response rate and consensus, and turned into drf's TR and N as a site
// file fragment. It is offline: the "gateway delphi" command runs it, the
// daemon never does.
package delphi

import (
	"bytes"
	"encoding/csv"
	"errors"
	"fieldlink/selector"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
)

// factorNames are drf's factors as the site file and the CSV name them, in
// the order of [selector.DRFFactors.At].
var factorNames = selector.DRFFactorNames()

// Delphi's consistency checks, from the DRF paper's § 2.3 (docs/algorithms.md § 000).
const (
	// MinResponseRate is the least share of the experts asked who
	// must answer every item for a round to count (Call ≥ 90%).
	MinResponseRate = 0.9
	// MaxCV is the coefficient of variation σ/μ above which an item
	// shows no consensus.
	MaxCV = 0.5
	// MaxDisagreement is the largest share of items with CV above
	// MaxCV that ends the study; above it another round is needed.
	MaxDisagreement = 0.4
)

var (
	// ErrResponseRate is returned, wrapped with the round and its
	// rate, when the last round's response rate is below 90%: the round is
	// invalid and must be run again.
	ErrResponseRate = errors.New("selector: delphi: response rate below 90%")
	// ErrConsensus is returned, wrapped with the round and its share,
	// when more than 40% of the last round's items have a coefficient of
	// variation above 0.5: the results go back to the experts for another
	// round.
	ErrConsensus = errors.New("selector: delphi: no consensus, CV > 0.5 on more than 40% of items")
)

// Result is the outcome of the Delphi step of docs/algorithms.md § 000: the resource
// amount of each server and the demand of each service, per drf factor.
type Result struct {
	Asked  int     // experts asked, in every round
	Rounds []Round // in round order
	// Servers and Services hold, per name (sorted), the mean over the
	// answering experts of valid rounds of the PERT estimate
	// (lowest + 4·most likely + highest) / 6 per factor (reading: the
	// paper's aggregation formula is illegible in its only copy).
	Servers  []Estimate
	Services []Estimate
	// TR is the sum over the servers, per factor: drf's TR.
	TR selector.DRFFactors
	// Failed says which check the last round failed; empty when it passed
	// both.
	Failed string
}

// Estimate is one server's or service's amounts.
type Estimate struct {
	Name    string
	Factors selector.DRFFactors
}

// Round is one round's checks.
type Round struct {
	Round        int
	Experts      int     // experts with at least one answer
	Answered     int     // experts who answered every item
	ResponseRate float64 // Answered / Asked
	Items        int     // items × {lowest, highest, most likely}
	Disagreeing  int     // of Items, those with CV = σ/μ > 0.5 among the answering experts
	Valid        bool    // ResponseRate ≥ 90%
	Consensus    bool    // Disagreeing ≤ 40% of Items
}

// item is one question: a server's or service's amount of a factor.
type item struct {
	service bool
	name    string
	factor  int
}

// answer is one expert's answer to one item in one round.
type answer struct {
	v    [3]float64 // lowest, highest, most likely
	line int
}

// Read reads expert answers as CSV and computes drf's TR and N.
//
// Each record is expert,round,target,factor,lowest,highest,most_likely. A
// first record starting with "expert" is a header. target is
// server:NAME (a resource amount: TR) or service:NAME (a demand: N); factor
// is one of failures, in_flight, consecutive_failures, rt_stddev (ms) or
// latency (ms); round is a number from 1; lowest ≤ most_likely ≤ highest,
// all ≥ 0. asked is how many experts were asked in each round.
//
// The items are every (target, factor) of the file, each in three parts
// (lowest, highest, most likely). In each round, an expert who answered
// every item has answered; the response rate is answered/asked, and a
// round below 90% is invalid and ignored. Each part's coefficient of
// variation σ/μ (population σ) is computed over the answering experts; when
// more than 40% of the parts have CV > 0.5 another round is needed. The
// estimates are the mean PERT estimate over the answering experts of every
// valid round.
//
// A malformed file gives an error naming the CSV line. When the last round
// fails a check, Read returns the result with an error wrapping
// [ErrResponseRate] or [ErrConsensus], and Failed says so.
func Read(r io.Reader, asked int) (Result, error) {
	res := Result{Asked: asked}
	if asked <= 0 {
		return res, fmt.Errorf("selector: delphi: experts asked must be at least 1, got %d", asked)
	}
	cr := csv.NewReader(r)
	cr.FieldsPerRecord = 7
	cr.TrimLeadingSpace = true
	answers := map[int]map[string]map[item]answer{} // round → expert → item
	items := map[item]int{}                         // → first line
	first := true
	for {
		rec, err := cr.Read()
		if err == io.EOF {
			break
		}
		if err != nil {
			return res, fmt.Errorf("selector: delphi: %w", err)
		}
		line, _ := cr.FieldPos(0)
		if first {
			first = false
			if strings.EqualFold(strings.TrimSpace(rec[0]), "expert") {
				continue
			}
		}
		for k := range rec {
			rec[k] = strings.TrimSpace(rec[k])
		}
		bad := func(format string, a ...any) error {
			return fmt.Errorf("selector: delphi: line %d: "+format, append([]any{line}, a...)...)
		}
		expert := rec[0]
		if expert == "" {
			return res, bad("expert is empty")
		}
		round, err := strconv.Atoi(rec[1])
		if err != nil || round < 1 {
			return res, bad("round must be a whole number from 1, got %q", rec[1])
		}
		var it item
		kind, name, ok := strings.Cut(rec[2], ":")
		switch {
		case !ok || strings.TrimSpace(name) == "":
			return res, bad("target must be server:NAME or service:NAME, got %q", rec[2])
		case kind == "server":
		case kind == "service":
			it.service = true
		default:
			return res, bad("target must be server:NAME or service:NAME, got %q", rec[2])
		}
		it.name = strings.TrimSpace(name)
		it.factor = slices.Index(factorNames, rec[3])
		if it.factor < 0 {
			return res, bad("factor must be one of %s, got %q", strings.Join(factorNames, ", "), rec[3])
		}
		var a answer
		a.line = line
		for k, col := range [3]string{"lowest", "highest", "most_likely"} {
			v, err := strconv.ParseFloat(rec[4+k], 64)
			if err != nil || v < 0 || math.IsInf(v, 0) || math.IsNaN(v) {
				return res, bad("%s must be a number ≥ 0, got %q", col, rec[4+k])
			}
			a.v[k] = v
		}
		if !(a.v[0] <= a.v[2] && a.v[2] <= a.v[1]) {
			return res, bad("need lowest ≤ most_likely ≤ highest, got %v, %v, %v", a.v[0], a.v[2], a.v[1])
		}
		byExpert := answers[round]
		if byExpert == nil {
			byExpert = map[string]map[item]answer{}
			answers[round] = byExpert
		}
		its := byExpert[expert]
		if its == nil {
			its = map[item]answer{}
			byExpert[expert] = its
		}
		if prev, dup := its[it]; dup {
			return res, bad("expert %q already answered %s %s in round %d, on line %d", expert, rec[2], rec[3], round, prev.line)
		}
		its[it] = a
		if _, seen := items[it]; !seen {
			items[it] = line
		}
	}
	if len(answers) == 0 {
		return res, errors.New("selector: delphi: no answers")
	}

	order := make([]item, 0, len(items))
	for it := range items {
		order = append(order, it)
	}
	slices.SortFunc(order, func(a, b item) int {
		switch {
		case a.service != b.service:
			if a.service {
				return 1
			}
			return -1
		case a.name != b.name:
			return strings.Compare(a.name, b.name)
		}
		return a.factor - b.factor
	})
	// Every factor a service needs must be on some server.
	for _, it := range order {
		if it.service && !slices.ContainsFunc(order, func(s item) bool { return !s.service && s.factor == it.factor }) {
			return res, fmt.Errorf("selector: delphi: line %d: service %q needs %s but no server has an amount of it", items[it], it.name, factorNames[it.factor])
		}
	}

	rounds := make([]int, 0, len(answers))
	for p := range answers {
		rounds = append(rounds, p)
	}
	slices.Sort(rounds)
	sum := map[item]float64{}
	cnt := map[item]int{}
	for _, p := range rounds {
		byExpert := answers[p]
		if len(byExpert) > asked {
			return res, fmt.Errorf("selector: delphi: round %d has answers from %d experts, more than the %d asked", p, len(byExpert), asked)
		}
		var complete []string
		for e, its := range byExpert {
			if len(its) == len(items) {
				complete = append(complete, e)
			}
		}
		slices.Sort(complete)
		rd := Round{
			Round:        p,
			Experts:      len(byExpert),
			Answered:     len(complete),
			ResponseRate: float64(len(complete)) / float64(asked),
			Items:        3 * len(order),
		}
		for _, it := range order {
			for k := range 3 {
				var vs []float64
				for _, e := range complete {
					vs = append(vs, byExpert[e][it].v[k])
				}
				if cv(vs) > MaxCV {
					rd.Disagreeing++
				}
			}
		}
		rd.Valid = rd.ResponseRate >= MinResponseRate
		rd.Consensus = float64(rd.Disagreeing) <= MaxDisagreement*float64(rd.Items)
		res.Rounds = append(res.Rounds, rd)
		if !rd.Valid {
			continue
		}
		for _, e := range complete {
			for it, a := range byExpert[e] {
				sum[it] += (a.v[0] + 4*a.v[2] + a.v[1]) / 6
				cnt[it]++
			}
		}
	}
	var tr selector.DRFFactors
	for _, it := range order {
		if cnt[it] == 0 {
			continue
		}
		est := &res.Servers
		if it.service {
			est = &res.Services
		}
		if len(*est) == 0 || (*est)[len(*est)-1].Name != it.name {
			*est = append(*est, Estimate{Name: it.name})
		}
		e := &(*est)[len(*est)-1]
		v := sum[it] / float64(cnt[it])
		e.Factors.Set(it.factor, v)
		if !it.service {
			tr.Set(it.factor, tr.At(it.factor)+v)
		}
	}
	res.TR = tr

	last := res.Rounds[len(res.Rounds)-1]
	switch {
	case !last.Valid:
		res.Failed = fmt.Sprintf("round %d: response rate %d/%d = %s < 90%%: the round is invalid, run it again",
			last.Round, last.Answered, asked, percent(last.ResponseRate))
		return res, fmt.Errorf("%w: %s", ErrResponseRate, res.Failed)
	case !last.Consensus:
		res.Failed = fmt.Sprintf("round %d: CV > 0.5 on %d of %d items = %s > 40%%: send the results back for another round",
			last.Round, last.Disagreeing, last.Items, percent(float64(last.Disagreeing)/float64(last.Items)))
		return res, fmt.Errorf("%w: %s", ErrConsensus, res.Failed)
	}
	return res, nil
}

// cv is σ/μ (population σ) of vs: 0 for no values or all zero, +Inf
// for a zero mean with spread.
func cv(vs []float64) float64 {
	if len(vs) == 0 {
		return 0
	}
	var sum float64
	for _, v := range vs {
		sum += v
	}
	mean := sum / float64(len(vs))
	var ss float64
	for _, v := range vs {
		ss += (v - mean) * (v - mean)
	}
	sd := math.Sqrt(ss / float64(len(vs)))
	if sd == 0 {
		return 0
	}
	if mean == 0 {
		return math.Inf(1)
	}
	return sd / mean
}

func percent(x float64) string {
	return strconv.FormatFloat(math.Round(x*1000)/10, 'f', -1, 64) + "%"
}

// num formats an amount for YAML, to 4 decimals.
func num(x float64) string {
	return strconv.FormatFloat(math.Round(x*1e4)/1e4, 'f', -1, 64)
}

// flow writes factors as a YAML flow mapping.
func flow(f selector.DRFFactors) string {
	var b strings.Builder
	b.WriteByte('{')
	for k, name := range factorNames {
		if k > 0 {
			b.WriteString(", ")
		}
		b.WriteString(name)
		b.WriteString(": ")
		b.WriteString(num(f.At(k)))
	}
	b.WriteByte('}')
	return b.String()
}

// YAML returns the result as a site-config fragment: uplink.selector drf
// with its tr and n, the checks of every round and the per-server amounts
// in comments. With several services, n is the first by name and the
// others follow commented out. A failed check heads the fragment.
func (r Result) YAML() []byte {
	var b bytes.Buffer
	if r.Failed != "" {
		fmt.Fprintf(&b, "# NOT READY: %s\n", r.Failed)
	}
	fmt.Fprintf(&b, "# Delphi (docs/algorithms.md § 000): %d experts asked, %d rounds; PERT (lowest + 4·most likely + highest)/6,\n", r.Asked, len(r.Rounds))
	b.WriteString("# mean over the experts who answered every item in the valid rounds.\n")
	for _, rd := range r.Rounds {
		cmp, verdict := "≥", "valid"
		if !rd.Valid {
			cmp, verdict = "<", "INVALID (ignored)"
		}
		cons, share := "≤", 0.0
		if rd.Items > 0 {
			share = float64(rd.Disagreeing) / float64(rd.Items)
		}
		if !rd.Consensus {
			cons = ">"
			verdict += ", no consensus"
		}
		fmt.Fprintf(&b, "# round %d: %d/%d answered every item (%s %s 90%%), CV > 0.5 on %d of %d items (%s %s 40%%): %s\n",
			rd.Round, rd.Answered, r.Asked, percent(rd.ResponseRate), cmp, rd.Disagreeing, rd.Items, percent(share), cons, verdict)
	}
	for _, s := range r.Servers {
		fmt.Fprintf(&b, "# server %s: %s\n", s.Name, flow(s.Factors))
	}
	b.WriteString("uplink:\n  selector: drf\n  drf:\n")
	fmt.Fprintf(&b, "    tr: %s\n", flow(r.TR))
	if len(r.Services) == 0 {
		b.WriteString("    # n: no service was rated\n")
	}
	for k, s := range r.Services {
		prefix := "    n: "
		if k > 0 {
			prefix = "    # n: "
		}
		fmt.Fprintf(&b, "%s%s # service %s\n", prefix, flow(s.Factors), s.Name)
	}
	return b.Bytes()
}
