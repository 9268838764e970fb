package api

import (
	"net/http"
	"strconv"
	"sync"

	"github.com/gpuhub/gpuhub/services/gpu-quota/internal/admit"
	"github.com/gpuhub/gpuhub/services/internal/jsonappend"
	"github.com/gpuhub/gpuhub/services/internal/server"
)

// writeResult writes an admission's answer with status 200, as server.WriteJSON does: the same headers and
// the same bytes as json.Encoder, newline included. The answers without a waitlist place (all but a join)
// are written by appendResult without reflection, from a pooled buffer; a join goes through server.WriteJSON.
//
// 64 spawns at once wait on these answers one after the other on a busy core; json.Encoder's reflection was a
// tenth of the handler's CPU.
func writeResult(w http.ResponseWriter, res admit.Result) {
	if res.Waitlist != nil || res.JoinOffered { // refusals with the waitlist on: encoding/json
		server.WriteJSON(w, http.StatusOK, res)
		return
	}
	bp := resultBuffers.Get().(*[]byte)
	b := appendResult((*bp)[:0], res)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(b)
	if cap(b) <= 64<<10 { // an answer with a long list would keep its buffer for ever
		*bp = b
		resultBuffers.Put(bp)
	}
}

var resultBuffers = sync.Pool{New: func() any { b := make([]byte, 0, 2048); return &b }}

// appendResult appends res as json.Encoder writes it, less the waitlist's fields (writeResult leaves answers
// with them to encoding/json): the fields in the struct's order, omitempty's rule for the reservation, a nil list
// as null.
func appendResult(b []byte, res admit.Result) []byte {
	b = append(b, `{"allow":`...)
	b = strconv.AppendBool(b, res.Allow)
	b = append(b, `,"reason":`...)
	b = jsonappend.String(b, res.Reason)
	b = append(b, `,"message":`...)
	b = jsonappend.String(b, res.Message)
	b = append(b, `,"decisionId":`...)
	b = jsonappend.String(b, res.DecisionID)
	if res.Reservation != "" {
		b = append(b, `,"reservation":`...)
		b = jsonappend.String(b, res.Reservation)
	}
	b = append(b, `,"canTake":`...)
	if res.CanTake == nil {
		b = append(b, "null"...)
	} else {
		b = append(b, '[')
		for i, o := range res.CanTake {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, `{"kind":`...)
			b = jsonappend.String(b, string(o.Kind))
			b = append(b, `,"class":`...)
			b = jsonappend.String(b, o.Class)
			b = append(b, `,"description":`...)
			b = jsonappend.String(b, o.Description)
			b = append(b, `,"free":`...)
			b = strconv.AppendInt(b, o.Free, 10)
			b = append(b, '}')
		}
		b = append(b, ']')
	}
	b = append(b, `,"onUnavailable":`...)
	b = jsonappend.String(b, string(res.OnUnavailable))
	if res.CountedPod {
		b = append(b, `,"countedPod":true`...)
	}
	return append(b, "}\n"...)
}
