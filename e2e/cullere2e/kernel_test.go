//go:build e2e

package cullere2e

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"golang.org/x/net/websocket"
)

// busyCell keeps the simulated GPU busy without a word: six tenths of every second in a loop, the rest asleep (the
// agent reads about 60 % of one CPU, far above the policy's busyPercent even when the kernel gets a third of that,
// and the machine keeps a core for the others).
const busyCell = `import time
while True:
    t = time.time()
    while time.time() - t < 0.6:
        pass
    time.sleep(0.4)
`

// runSilentCell starts a kernel on user's server through the Jupyter server's REST API, sends it code over the
// kernel's websocket as JupyterLab does, waits until the kernel reports busy, and closes the websocket: the cell
// runs on with no browser and no further request to the server. Everything goes through the Hub's proxy with the
// user's token.
func runSilentCell(ctx context.Context, hubURL, user, server, token, code string) error {
	base := hubURL + "user/" + url.PathEscape(user) + "/" + url.PathEscape(server) + "/"
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"api/kernels", strings.NewReader(`{"name":"python3"}`))
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "token "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("start a kernel: %w", err)
	}
	var kernel struct {
		ID string `json:"id"`
	}
	err = json.NewDecoder(resp.Body).Decode(&kernel)
	_ = resp.Body.Close()
	switch {
	case resp.StatusCode != http.StatusCreated:
		return fmt.Errorf("start a kernel: %s", resp.Status)
	case err != nil:
		return fmt.Errorf("start a kernel: %w", err)
	case kernel.ID == "":
		return fmt.Errorf("start a kernel: no kernel id in the answer")
	}

	session, msgID := newID(), newID()
	wsURL := "ws" + strings.TrimPrefix(base, "http") + "api/kernels/" + kernel.ID + "/channels?session_id=" + session
	cfg, err := websocket.NewConfig(wsURL, hubURL)
	if err != nil {
		return err
	}
	cfg.Header = http.Header{"Authorization": {"token " + token}}
	deadline := time.Now().Add(60 * time.Second)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	var ws *websocket.Conn
	// The kernel may take a moment to start; its channels answer once it has.
	for {
		ws, err = cfg.DialContext(ctx)
		if err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	if err != nil {
		return fmt.Errorf("kernel websocket: %w", err)
	}
	defer ws.Close()
	_ = ws.SetDeadline(deadline)
	header := map[string]any{"msg_id": msgID, "session": session, "username": user, "msg_type": "execute_request",
		"version": "5.3", "date": time.Now().UTC().Format(time.RFC3339Nano)}
	msg := map[string]any{"header": header, "parent_header": map[string]any{}, "metadata": map[string]any{}, "channel": "shell",
		"buffers": []any{}, "content": map[string]any{"code": code, "silent": false, "store_history": true,
			"user_expressions": map[string]any{}, "allow_stdin": false, "stop_on_error": true}}
	if err := websocket.JSON.Send(ws, msg); err != nil {
		return fmt.Errorf("send the cell: %w", err)
	}
	for {
		var in struct {
			Channel      string `json:"channel"`
			ParentHeader struct {
				MsgID string `json:"msg_id"`
			} `json:"parent_header"`
			Header struct {
				MsgType string `json:"msg_type"`
			} `json:"header"`
			Content struct {
				ExecutionState string `json:"execution_state"`
			} `json:"content"`
		}
		if err := websocket.JSON.Receive(ws, &in); err != nil {
			return fmt.Errorf("waiting for the kernel to run the cell: %w", err)
		}
		if in.ParentHeader.MsgID == msgID && in.Header.MsgType == "status" && in.Content.ExecutionState == "busy" {
			return nil
		}
	}
}

func newID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
