package replay

// Variation is one setting of the idleness model and the anchor's and gpuhub's numbers under it.
type Variation struct {
	Name    string
	Results []*Result
}

// Sensitivity replays the idleness model's variations.
func Sensitivity(cfg *Config, pol Policies, nodes []TraceNode, pods []TracePod) ([]Variation, error) {
	return nil, nil
}
