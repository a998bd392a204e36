package unitctl

import "testing"

func TestRenderExec(t *testing.T) {
	tests := []struct {
		cmd  execCommand
		want string
	}{
		{execCommand{Path: "/bin/true", Argv: []string{"/bin/true"}}, `"/bin/true"`},
		{execCommand{Path: "/bin/sh", Argv: []string{"/bin/sh", "-c", `echo "a b" \ $HOME 50%`}, Flags: []string{"ignore-failure"}},
			`-"/bin/sh" "-c" "echo \"a b\" \\ $HOME 50%%"`},
		{execCommand{Path: "/bin/busybox", Argv: []string{"sh", "-c", "x"}, Flags: []string{"privileged", "no-env-expand"}},
			`+:@"/bin/busybox" "sh" "-c" "x"`},
		{execCommand{Path: "/bin/x", Argv: []string{"/bin/x", "tab\there", "nl\n"}, Flags: []string{"ambient"}},
			`!!"/bin/x" "tab\x09here" "nl\x0a"`},
		{execCommand{Path: "/bin/x", Argv: []string{"/bin/x", ""}, Flags: []string{"no-setuid"}}, `!"/bin/x" ""`},
	}
	for _, tt := range tests {
		got, err := renderExec(tt.cmd)
		if err != nil {
			t.Fatal(err)
		}
		if got != tt.want {
			t.Errorf("renderExec(%+v)\n got %s\nwant %s", tt.cmd, got, tt.want)
		}
	}
	if _, err := renderExec(execCommand{Path: "/x", Argv: []string{"/x"}, Flags: []string{"new-flag"}}); err == nil {
		t.Error("an unknown flag was rendered")
	}
}

func TestSameExec(t *testing.T) {
	a := execCommand{Path: "/x", Argv: []string{"/x", "1"}, Flags: []string{"privileged", "ignore-failure"}, PID: 7}
	b := execCommand{Path: "/x", Argv: []string{"/x", "1"}, Flags: []string{"ignore-failure", "privileged"}}
	if !sameExec(a, b) {
		t.Error("flag order or run data made a difference")
	}
	b.Argv[1] = "2"
	if sameExec(a, b) {
		t.Error("different arguments compared equal")
	}
}
