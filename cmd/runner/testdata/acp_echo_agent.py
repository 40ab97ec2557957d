# A minimal ACP agent over stdio, in Python (stdlib only), for the
# outside-view benchmark: a harness that is not written in Go. It answers
# every prompt with three agent_message_chunk updates ("echo: ", the
# prompt text, ".") and then the end_turn result.
import json
import sys
import uuid


def main():
    out = sys.stdout

    def send(msg):
        out.write(json.dumps(msg, separators=(",", ":")) + "\n")
        out.flush()

    for line in sys.stdin:
        line = line.strip()
        if not line:
            continue
        try:
            msg = json.loads(line)
        except ValueError:
            continue
        method = msg.get("method")
        mid = msg.get("id")
        params = msg.get("params") or {}
        if method is None or mid is None:
            continue  # a response or a notification (session/cancel): nothing to do
        if method == "initialize":
            result = {
                "protocolVersion": 1,
                "agentCapabilities": {"loadSession": False, "promptCapabilities": {}},
                "agentInfo": {"name": "py-echo", "version": "1.0.0"},
                "authMethods": [],
            }
        elif method == "session/new":
            result = {"sessionId": "py-" + uuid.uuid4().hex[:12]}
        elif method == "session/prompt":
            sid = params.get("sessionId", "")
            text = "".join(b.get("text", "") for b in params.get("prompt", []) if b.get("type") == "text")
            for chunk in ("echo: ", text, "."):
                send({"jsonrpc": "2.0", "method": "session/update", "params": {
                    "sessionId": sid,
                    "update": {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": chunk}},
                }})
            result = {"stopReason": "end_turn"}
        elif method == "session/set_mode":
            result = {}
        else:
            send({"jsonrpc": "2.0", "id": mid, "error": {"code": -32601, "message": "method not found: " + method}})
            continue
        send({"jsonrpc": "2.0", "id": mid, "result": result})


if __name__ == "__main__":
    main()
