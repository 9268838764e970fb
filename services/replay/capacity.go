package replay

import (
	"fmt"
	"slices"
)

// CapacityRow is the anchor (Kubernetes + idle-culler) at one capacity of the rule's grid.
type CapacityRow struct {
	Want        int     // capacity.gpus asked for
	GPUs        int64   // what the node subset holds (whole nodes: at least Want)
	WaitedShare float64 // the anchor's requests with a time-to-GPU above 0
	WaitP99     float64 // minutes
}

// CapacityRule is how the main capacity was chosen: the grid's rows and the pick.
type CapacityRule struct {
	Rows   []CapacityRow
	Chosen int // capacity.gpus of the main scenario
}

// ChooseCapacity applies capacity.choose: it replays only the anchor at every capacity of the grid, on the
// cluster every setup gets (time-slicing included), and picks the largest at which at least WaitedShare of its
// requests wait. gpuhub's runs play no part in the choice.
func ChooseCapacity(cfg *Config, pol Policies, nodes []TraceNode, pods []TracePod) (CapacityRule, error) {
	ch := cfg.Capacity.Choose
	var wants []int
	for g := ch.From; g <= ch.To; g += ch.Step {
		wants = append(wants, g)
	}
	rows := make([]CapacityRow, len(wants))
	err := parallel(len(wants), func(i int) error {
		c := *cfg
		c.Capacity.GPUs = wants[i]
		w, err := BuildWorkload(&c, nodes, pods)
		if err != nil {
			return err
		}
		env, err := NewEnv(&c, w, pol)
		if err != nil {
			return err
		}
		r, err := Run(env, HubCuller)
		if err != nil {
			return err
		}
		rows[i] = CapacityRow{Want: wants[i], GPUs: r.GPUs, WaitedShare: r.WaitedShare, WaitP99: r.WaitP99}
		return nil
	})
	if err != nil {
		return CapacityRule{}, err
	}
	chosen, err := pickCapacity(rows, ch.WaitedShare)
	return CapacityRule{Rows: rows, Chosen: chosen}, err
}

// pickCapacity is the largest capacity of the rows at which at least share of the anchor's requests waited.
func pickCapacity(rows []CapacityRow, share float64) (int, error) {
	best := -1
	for _, r := range rows {
		if r.WaitedShare >= share {
			best = max(best, r.Want)
		}
	}
	if best < 0 {
		lowest := slices.MinFunc(rows, func(a, b CapacityRow) int { return a.Want - b.Want })
		return 0, fmt.Errorf("capacity.choose: no capacity from %d GPUs up makes %.0f %% of the anchor's requests wait; "+
			"lower capacity.choose.from or the waitedShare", lowest.Want, 100*share)
	}
	return best, nil
}
