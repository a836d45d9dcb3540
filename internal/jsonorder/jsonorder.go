// Package jsonorder reads a JSON object's members in the order they are
// written, which encoding/json's maps lose: report.json's metrics are
// shown and compared in the order canopy wrote them.
package jsonorder

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
)

// ErrNotObject is returned for input that is not a JSON object.
var ErrNotObject = errors.New("jsonorder: not a JSON object")

// Member is one member of an object: its key and its value's JSON text.
type Member struct {
	Key   string
	Value json.RawMessage
}

// Members returns the members of the JSON object b in written order (a
// key written twice appears twice).
func Members(b []byte) ([]Member, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil, ErrNotObject
	}
	var ms []Member
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return nil, fmt.Errorf("jsonorder: %w", err)
		}
		key := t.(string) // inside an object a token here is a key
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, fmt.Errorf("jsonorder: %s: %w", key, err)
		}
		ms = append(ms, Member{key, v})
	}
	if t, err := dec.Token(); err != nil || t != json.Delim('}') {
		return nil, ErrNotObject
	}
	return ms, nil
}
