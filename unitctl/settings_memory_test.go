package unitctl

import (
	"testing"
	"unsafe"
)

// TestSettingsKeepNoneOfTheMessage: the settings decoded from a unit's
// properties copy every string they keep, so a Plan built from them
// (held by the daemon until the drop-ins of every unit are in effect)
// holds none of the D-Bus message's memory. godbus decodes a message's
// strings into shared 4 KB buffers: one string kept per unit kept 33 MB
// of buffers alive while a daemon validated 5,000 units.
func TestSettingsKeepNoneOfTheMessage(t *testing.T) {
	buf := []byte("a.service loaded enabled /etc/systemd/system/a.service /run/x.conf multi-user.target simple mixed terminate /bin/pre pre-arg ignore-failure")
	at := func(s string) string {
		for i := 0; i+len(s) <= len(buf); i++ {
			if string(buf[i:i+len(s)]) == s {
				return unsafe.String(&buf[i], len(s))
			}
		}
		t.Fatalf("%q is not in the buffer", s)
		return ""
	}
	u := map[string]any{
		"Id": at("a.service"), "LoadState": at("loaded"), "UnitFileState": at("enabled"),
		"FragmentPath": at("/etc/systemd/system/a.service"), "DropInPaths": []string{at("/run/x.conf")},
		"WantedBy": []string{at("multi-user.target")}, "RequiredBy": []string{at("multi-user.target")},
		"UpheldBy": []string{at("a.service")}, "TriggeredBy": []string{at("a.service")}, "BoundBy": []string{at("a.service")},
		"OnFailureOf": []string{at("a.service")}, "OnSuccessOf": []string{at("a.service")},
		"BindsTo": []string{at("a.service")}, "After": []string{at("multi-user.target")},
	}
	// ExecStartPreEx and the others as godbus decodes a(sasasttttuii).
	exec := [][]any{{at("/bin/pre"), []string{at("/bin/pre"), at("pre-arg")}, []string{at("ignore-failure")},
		uint64(0), uint64(0), uint64(0), uint64(0), uint32(0), int32(0), int32(0)}}
	svc := map[string]any{
		"Type": at("simple"), "BusName": at("a.service"), "KillMode": at("mixed"), "TimeoutStopFailureMode": at("terminate"),
		"ExecStartPreEx": exec, "ExecStopEx": exec, "ExecStopPostEx": exec,
	}
	s, err := decodeSettings("a.service", u, svc)
	if err != nil {
		t.Fatal(err)
	}
	if s.KillMode != "mixed" || len(s.ExecStartPre) != 1 || s.ExecStartPre[0].Path != "/bin/pre" || len(s.ExecStop) != 1 || len(s.WantedBy) != 1 {
		t.Fatalf("decoded %+v; want the properties given", s)
	}
	var kept []string
	kept = append(kept, s.ID, s.LoadState, s.UnitFileState, s.FragmentPath, s.Type, s.BusName, s.KillMode, s.TimeoutStopFailureMode)
	for _, l := range [][]string{s.DropInPaths, s.WantedBy, s.RequiredBy, s.UpheldBy, s.TriggeredBy, s.BoundBy, s.OnFailureOf, s.OnSuccessOf, s.BindsTo, s.After} {
		kept = append(kept, l...)
	}
	for _, cmds := range [][]execCommand{s.ExecStartPre, s.ExecStop, s.ExecStopPost} {
		for _, c := range cmds {
			kept = append(kept, c.Path)
			kept = append(kept, c.Argv...)
			kept = append(kept, c.Flags...)
		}
	}
	lo := uintptr(unsafe.Pointer(&buf[0]))
	for _, k := range kept {
		if p := uintptr(unsafe.Pointer(unsafe.StringData(k))); p >= lo && p < lo+uintptr(len(buf)) {
			t.Errorf("the settings' %q points into the message's buffer", k)
		}
	}
	if len(kept) != 30 {
		t.Fatalf("checked %d strings; the test misses some of the settings", len(kept))
	}
}
