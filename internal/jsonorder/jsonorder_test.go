package jsonorder

import (
	"errors"
	"testing"
)

func TestMembersKeepWrittenOrder(t *testing.T) {
	ms, err := Members([]byte(` {"z": 1, "a": [1, 2], "m": null, "a": {"x": "y"}} `))
	if err != nil {
		t.Fatal(err)
	}
	want := []Member{{"z", []byte("1")}, {"a", []byte("[1, 2]")}, {"m", []byte("null")}, {"a", []byte(`{"x": "y"}`)}}
	if len(ms) != len(want) {
		t.Fatalf("%d members, want %d", len(ms), len(want))
	}
	for i := range want {
		if ms[i].Key != want[i].Key || string(ms[i].Value) != string(want[i].Value) {
			t.Errorf("member %d: %s=%s, want %s=%s", i, ms[i].Key, ms[i].Value, want[i].Key, want[i].Value)
		}
	}
	for _, bad := range []string{"", "[1]", "3", `{"a": 1`, `{"a": }`} {
		if _, err := Members([]byte(bad)); err == nil {
			t.Errorf("%q accepted", bad)
		} else if (bad == "" || bad == "[1]" || bad == "3") && !errors.Is(err, ErrNotObject) {
			t.Errorf("%q: %v, want ErrNotObject", bad, err)
		}
	}
}
