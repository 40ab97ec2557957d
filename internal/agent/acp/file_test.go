package acp

import (
	"testing"

	"github.com/agentrunner/runner/internal/wire"
	"github.com/google/go-cmp/cmp"
)

// TestFileEvents: an image or resource link the agent sends in its
// message is a file event.
func TestFileEvents(t *testing.T) {
	m := newMapper()
	var got []wire.Event
	for _, u := range []string{
		`{"sessionUpdate":"agent_message_chunk","content":{"type":"image","data":"aGk=","mimeType":"image/png"}}`,
		`{"sessionUpdate":"agent_message_chunk","content":{"type":"resource_link","uri":"file:///work/out.csv","name":"out.csv","mimeType":"text/csv"}}`,
		`{"sessionUpdate":"agent_message_chunk","content":{"type":"audio","data":"x","mimeType":"audio/wav"}}`,
	} {
		got = append(got, m.update([]byte(u))...)
	}
	want := []wire.Event{
		{Type: wire.EventFile, URL: "data:image/png;base64,aGk=", MediaType: "image/png"},
		{Type: wire.EventFile, URL: "file:///work/out.csv", MediaType: "text/csv"},
		{Type: wire.EventData, Name: "acp.agent_message_chunk", Data: []byte(`{"type":"audio","data":"x","mimeType":"audio/wav"}`)},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
}
