package bench

import (
	"os"
	"runtime"
	"runtime/debug"
	"time"

	"github.com/gpuhub/gpuhub/services/usage-api/internal/usage"
)

// MeasureFootprint fills one hour of 5 s history for gpus users holding one GPU each and returns the heap, the
// memory mapped outside it and the RSS it added.
func MeasureFootprint(gpus int) Footprint {
	debug.SetGCPercent(10)
	views := make([]*usage.View, 0, 2)
	users := map[string]*usage.User{}
	for i := range gpus {
		used := 0.5
		users[UserName(i)] = &usage.User{Name: UserName(i), Share: usage.Share{AllocatedGPUs: 1, UsedGPUs: &used, MemoryUsedBytes: 1 << 30}}
	}
	views = append(views, &usage.View{Users: users})
	before := heap()
	rss0 := rssBytes(os.Getpid())
	h := usage.NewHistory(time.Hour, 5*time.Second)
	start := time.Now()
	for i := range 720 {
		v := *views[0]
		v.SampledAt = start.Add(time.Duration(i) * 5 * time.Second)
		h.Add(&v)
	}
	after := heap()
	fp := Footprint{Heap: int64(after) - int64(before), Mapped: h.MappedBytes(), RSS: rssBytes(os.Getpid()) - rss0}
	runtime.KeepAlive(h)
	runtime.KeepAlive(views)
	return fp
}

func heap() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}
