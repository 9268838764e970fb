package gpu

import (
	"math"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestFormatGPUs(t *testing.T) {
	cases := map[string]struct {
		in          float64
		want, want2 string // FormatGPUs, Amount
	}{
		"zero":                       {in: 0, want: "0", want2: "no GPU"},
		"whole":                      {in: 1, want: "1", want2: "1 GPU"},
		"two":                        {in: 2, want: "2", want2: "2 GPUs"},
		"MIG 3g on an A100":          {in: 3.0 / 7, want: "3/7", want2: "3/7 of a GPU"},
		"4-way time-sliced":          {in: 0.25, want: "1/4", want2: "1/4 of a GPU"},
		"time-sliced MIG":            {in: 1.0 / 14, want: "1/14", want2: "1/14 of a GPU"},
		"sum that float64 rounds":    {in: 3.0/7 + 3.0/7 + 1.0/7, want: "1", want2: "1 GPU"},
		"mixed":                      {in: 1.5, want: "1 1/2", want2: "1 1/2 GPUs"},
		"MIG plus a quarter":         {in: 3.0/7 + 0.25, want: "19/28", want2: "19/28 of a GPU"},
		"no small fraction":          {in: 0.4286, want: "0.43", want2: "0.43 of a GPU"},
		"unlimited":                  {in: math.Inf(1), want: "unlimited", want2: "unlimited GPUs"},
		"negative (a difference)":    {in: -0.25, want: "-1/4", want2: "-1/4 GPUs"},
		"not a number stays visible": {in: math.NaN(), want: "unknown", want2: "unknown GPUs"},
		"huge":                       {in: 1e15, want: "1000000000000000", want2: "1000000000000000 GPUs"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := FormatGPUs(tc.in); got != tc.want {
				t.Errorf("FormatGPUs(%v) = %q, want %q", tc.in, got, tc.want)
			}
			if got := Amount(tc.in); got != tc.want2 {
				t.Errorf("Amount(%v) = %q, want %q", tc.in, got, tc.want2)
			}
		})
	}
}

func TestUnits(t *testing.T) {
	a100 := "NVIDIA A100-SXM4-40GB"
	cases := map[string]struct {
		in   []Allocation
		want string
	}{
		"nothing":   {in: nil, want: "no GPU"},
		"whole":     {in: []Allocation{{Kind: KindGPU, Count: 1, Product: "NVIDIA H100-80GB-HBM3"}}, want: "one whole H100"},
		"two whole": {in: []Allocation{{Kind: KindGPU, Count: 2, Product: "NVIDIA H100-80GB-HBM3"}}, want: "two whole H100s"},
		"MIG":       {in: []Allocation{{Kind: KindMIG, Count: 1, Product: a100, Profile: "3g.20gb"}}, want: "one MIG 3g.20gb slice on an A100"},
		"time-sliced T4": {in: []Allocation{{Kind: KindShared, Count: 1, Product: "Tesla-T4"}},
			want: "one time-sliced share of a T4"},
		"MPS":             {in: []Allocation{{Kind: KindMPS, Count: 1, Product: a100}}, want: "one MPS share of an A100"},
		"time-sliced MIG": {in: []Allocation{{Kind: KindSharedMIG, Count: 1, Product: a100, Profile: "1g.5gb"}}, want: "one time-sliced share of a MIG 1g.5gb slice on an A100"},
		"unknown model":   {in: []Allocation{{Kind: KindGPU, Count: 1}}, want: "one whole GPU"},
		"same units of two pods count together": {in: []Allocation{
			{Kind: KindMIG, Count: 1, Product: a100, Profile: "3g.20gb"},
			{Kind: KindGPU, Count: 1, Product: "NVIDIA H100-80GB-HBM3"},
			{Kind: KindMIG, Count: 1, Product: a100, Profile: "3g.20gb"},
		}, want: "two MIG 3g.20gb slices on an A100 and one whole H100"},
		"three kinds": {in: []Allocation{
			{Kind: KindGPU, Count: 1, Product: "NVIDIA H100-80GB-HBM3"},
			{Kind: KindShared, Count: 1, Product: "Tesla-T4"},
			{Kind: KindMIG, Count: 12, Product: a100, Profile: "1g.5gb"},
		}, want: "one whole H100, one time-sliced share of a T4 and 12 MIG 1g.5gb slices on an A100"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, JoinUnits(tc.in)); diff != "" {
				t.Errorf("JoinUnits (-want +got):\n%s", diff)
			}
		})
	}
}

func TestKinds(t *testing.T) {
	for _, k := range Kinds() {
		if !k.Known() {
			t.Errorf("%q is in Kinds but not Known", k)
		}
		if k.Plural() == string(k)+" GPUs" {
			t.Errorf("%q has no plural of its own", k)
		}
	}
	for _, k := range []Kind{"", "GPU", "mig-3g.20gb", "shared "} {
		if k.Known() {
			t.Errorf("%q is Known", k)
		}
	}
	// Policy errors quote this list: a new kind joins it, an old one keeps its place.
	if diff := cmp.Diff("gpu, mig, shared, mps, mig-shared", KindList()); diff != "" {
		t.Errorf("KindList (-want +got):\n%s", diff)
	}
}

func TestWithArticle(t *testing.T) {
	cases := map[string]struct{ in, want string }{
		"vowel letter":        {in: "A100", want: "an A100"},
		"H said aitch":        {in: "H100", want: "an H100"},
		"L said el":           {in: "L40S", want: "an L40S"},
		"M said em":           {in: "M60", want: "an M60"},
		"R said ar":           {in: "RTX", want: "an RTX"},
		"consonant sound":     {in: "T4", want: "a T4"},
		"B said bee":          {in: "B200", want: "a B200"},
		"G said gee":          {in: "GH200", want: "a GH200"},
		"lowercase vowel":     {in: "idle GPU", want: "an idle GPU"},
		"lowercase word":      {in: "whole GPU", want: "a whole GPU"},
		"MPS said em-pee-ess": {in: "MPS share of an A100", want: "an MPS share of an A100"},
		"MIG said as a word":  {in: "MIG 3g.20gb slice on an A100", want: "a MIG 3g.20gb slice on an A100"},
		"a capitalized word":  {in: "Shared T4", want: "a Shared T4"},
		"a model in a phrase": {in: "H100 slice", want: "an H100 slice"},
		"time-sliced":         {in: "time-sliced share of a T4", want: "a time-sliced share of a T4"},
		"empty":               {in: "", want: ""},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, WithArticle(tc.in)); diff != "" {
				t.Errorf("WithArticle(%q) (-want +got):\n%s", tc.in, diff)
			}
		})
	}
}
