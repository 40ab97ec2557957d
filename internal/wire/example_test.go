package wire_test

import (
	"encoding/json"
	"fmt"
	"os"

	"github.com/agentrunner/runner/internal/wire"
)

// A request body as the platform posts it to /run or /stream: Decode
// validates it and normalises each message's content to blocks.
func ExampleDecode() {
	body := []byte(`{
		"harness": "claude",
		"sessionId": "s1",
		"messages": [
			{"role": "user", "content": "list the files here"},
			{"role": "assistant", "content": [{"type": "text", "text": "README.md"}]},
			{"role": "user", "content": "and their sizes"}
		]
	}`)
	req, err := wire.Decode(body)
	if err != nil {
		fmt.Println("refused:", err)
		return
	}
	last := req.Messages[len(req.Messages)-1]
	fmt.Println(req.Harness, req.SessionID, len(req.Messages), last.Role, last.Content.Text)

	// A retired top-level credential field is refused, naming what to use.
	_, err = wire.Decode([]byte(`{"harness": "claude", "provider": "anthropic"}`))
	fmt.Println(err != nil)
	// Output:
	// claude s1 3 user and their sizes
	// true
}

// A streamed turn is NDJSON: one Record per line, the turn's events, then
// exactly one result, whose events list is empty (the events were the
// lines before it).
func ExampleRecord() {
	enc := json.NewEncoder(os.Stdout)
	for _, rec := range []wire.Record{
		{Kind: wire.RecordEvent, Seq: 1, Event: &wire.Event{Type: wire.EventMessageDelta, ID: "m1", Delta: "Hello"}},
		{Kind: wire.RecordEvent, Seq: 2, Event: &wire.Event{Type: wire.EventDone, StopReason: "end_turn"}},
		{Kind: wire.RecordResult, Result: &wire.Result{
			OK: true, Output: "Hello", StopReason: "end_turn",
			Messages: []wire.OutMessage{{Role: "assistant", Content: "Hello"}}, Events: []wire.Event{},
		}},
	} {
		if err := enc.Encode(rec); err != nil {
			fmt.Println(err)
		}
	}
	// Output:
	// {"kind":"event","seq":1,"event":{"type":"message_delta","id":"m1","delta":"Hello"}}
	// {"kind":"event","seq":2,"event":{"type":"done","stopReason":"end_turn"}}
	// {"kind":"result","result":{"ok":true,"output":"Hello","messages":[{"role":"assistant","content":"Hello"}],"events":[],"stopReason":"end_turn"}}
}
