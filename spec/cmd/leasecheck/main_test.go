package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

func TestJSONSafe(t *testing.T) {
	var out bytes.Buffer
	code, err := run([]string{"-lease-span", "36", "-reply-max", "0", "-json"}, &out)
	if code != 0 || err != nil {
		t.Fatalf("exit %d, %v", code, err)
	}
	var got map[string]any
	if err := json.Unmarshal(out.Bytes(), &got); err != nil {
		t.Fatalf("not one JSON object: %v\n%s", err, out.String())
	}
	for k, want := range map[string]any{
		"lease_span": 36.0, "reply_max": 0.0, "type_ok": true,
		"process_exclusion": true, "handoff": true, "counterexample": nil,
	} {
		if v, ok := got[k]; !ok || v != want {
			t.Errorf("%s = %v (present %t), want %v", k, v, ok, want)
		}
	}
	if states, _ := got["states"].(float64); states < 1000 {
		t.Errorf("states = %v", got["states"])
	}
}

func TestJSONViolation(t *testing.T) {
	var out bytes.Buffer
	code, err := run([]string{"-lease-span", "35", "-json"}, &out)
	if code != 1 || err != nil {
		t.Fatalf("exit %d, %v; want 1", code, err)
	}
	var got struct {
		ProcessExclusion bool `json:"process_exclusion"`
		Counterexample   []struct {
			Action string         `json:"action"`
			State  map[string]any `json:"state"`
		} `json:"counterexample"`
	}
	if err := json.Unmarshal(out.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	n := len(got.Counterexample)
	if got.ProcessExclusion || n == 0 {
		t.Fatalf("want a violation with steps, got %s", out.String())
	}
	last := got.Counterexample[n-1].State
	if last["oldAlive"] != true || last["newAlive"] != true || got.Counterexample[0].Action != "Init" {
		t.Errorf("trace does not run from Init to both alive: %v", got.Counterexample)
	}
}

func TestText(t *testing.T) {
	var out bytes.Buffer
	code, _ := run([]string{"-lease-span", "20"}, &out)
	text := out.String()
	if code != 1 || !strings.Contains(text, "ProcessExclusion  VIOLATED") || !strings.Contains(text, "Spawn") {
		t.Fatalf("exit %d:\n%s", code, text)
	}
}

func TestOutsideAssume(t *testing.T) {
	for _, args := range [][]string{
		{"-lease-span", "0"},
		{"-lease-span", "-4"},
		{"-reply-max", "21"},
		{"-reply-max", "-1"},
		{"-lease-span", "x"},
		{"-sweep", "-reply-max", "0", "-poll-low", "0"},
		{"extra"},
	} {
		var out bytes.Buffer
		code, err := run(args, &out)
		if code != 2 || err == nil || strings.Contains(err.Error(), "\n") || out.Len() != 0 {
			t.Errorf("%v: exit %d, err %q, output %q; want exit 2 and a one-line error", args, code, err, out.String())
		}
	}
}

func TestFailoverJSONSafe(t *testing.T) {
	var out bytes.Buffer
	code, err := run([]string{"-failover", "-max-lag", "0", "-detect", "0", "-json"}, &out)
	if code != 0 || err != nil {
		t.Fatalf("exit %d, %v", code, err)
	}
	var got map[string]any
	if err := json.Unmarshal(out.Bytes(), &got); err != nil {
		t.Fatalf("not one JSON object: %v\n%s", err, out.String())
	}
	for k, want := range map[string]any{
		"lease_span": 36.0, "max_lag": 0.0, "detect": 0.0, "rule": true, "type_ok": true,
		"process_exclusion": true, "handoff": true, "counterexample": nil, "law_max_lag": 0.0,
	} {
		if v, ok := got[k]; !ok || v != want {
			t.Errorf("%s = %v (present %t), want %v", k, v, ok, want)
		}
	}
}

func TestFailoverJSONViolationWithoutRule(t *testing.T) {
	var out bytes.Buffer
	code, err := run([]string{"-failover", "-rule=false", "-max-lag", "0", "-detect", "0", "-json"}, &out)
	if code != 1 || err != nil {
		t.Fatalf("exit %d, %v; want 1", code, err)
	}
	var got struct {
		ProcessExclusion bool `json:"process_exclusion"`
		Counterexample   []struct {
			Action string         `json:"action"`
			State  map[string]any `json:"state"`
		} `json:"counterexample"`
		Times []int `json:"counterexample_times"`
	}
	if err := json.Unmarshal(out.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	n := len(got.Counterexample)
	if got.ProcessExclusion || n == 0 || len(got.Times) != n {
		t.Fatalf("want a violation with timed steps, got %s", out.String())
	}
	last := got.Counterexample[n-1].State
	if last["oldAlive"] != true || last["newAlive"] != true || last["rolled"] != true || got.Counterexample[0].Action != "Init" {
		t.Errorf("trace does not run from Init to both alive after the rollback: %v", got.Counterexample)
	}
}

func TestFailoverHazardText(t *testing.T) {
	var out bytes.Buffer
	code, _ := run([]string{"-failover", "-rule=false", "-max-lag", "0", "-detect", "0", "-hazard", "held"}, &out)
	text := out.String()
	for _, want := range []string{"ProcessExclusion  VIOLATED", "Rollback", "Spawn", "t=36", "without the rule"} {
		if code != 1 || !strings.Contains(text, want) {
			t.Fatalf("exit %d, no %q in:\n%s", code, want, text)
		}
	}
}

func TestFailoverSweepText(t *testing.T) {
	var out bytes.Buffer
	code, err := run([]string{"-failover", "-sweep", "-detects", "0,2,6", "-lease-span", "6",
		"-retry", "1", "-renew", "2", "-stop-wait", "1", "-poll-low", "1", "-poll-high", "2"}, &out)
	text := out.String()
	if code != 0 || err != nil || strings.Contains(text, "DISAGREES") {
		t.Fatalf("exit %d, %v:\n%s", code, err, text)
	}
	// Bound 5: with the rule, MaxLag up to Detect + 1; without, Detect - 5.
	for _, row := range []string{"0  1  1  none  none", "2  3  3  none  none", "6  7  7  1  1"} {
		if !strings.Contains(strings.Join(strings.Fields(text), "  "), row) {
			t.Errorf("no row %q in:\n%s", row, text)
		}
	}
}

func TestFailoverFlagsMisused(t *testing.T) {
	for _, args := range [][]string{
		{"-rule=false"},
		{"-max-lag", "3"},
		{"-failover", "-reply-max", "3"},
		{"-failover", "-sweep", "-detect", "3"},
		{"-failover", "-hazard", "other"},
		{"-failover", "-detects", "1"},
		{"-failover", "-sweep", "-detects", "a"},
		{"-failover", "-max-lag", "-1"},
		{"-failover", "-retry", "0"},
	} {
		var out bytes.Buffer
		code, err := run(args, &out)
		if code != 2 || err == nil || strings.Contains(err.Error(), "\n") || out.Len() != 0 {
			t.Errorf("%v: exit %d, err %q, output %q; want exit 2 and a one-line error", args, code, err, out.String())
		}
	}
}
