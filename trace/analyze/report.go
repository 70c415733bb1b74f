package analyze

import (
	"encoding/hex"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/cairnkv/cairn/trace"
)

// FormatBytes writes n bytes with a binary unit (4KiB, 1.5MiB).
func FormatBytes(n int64) string {
	units := []string{"B", "KiB", "MiB", "GiB", "TiB", "PiB"}
	v, u := float64(n), 0
	for v >= 1024 && u < len(units)-1 {
		v /= 1024
		u++
	}
	s := fmt.Sprintf("%.1f", v)
	s = strings.TrimSuffix(s, ".0")
	return s + units[u]
}

func pct(num, den int64) string {
	if den == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f%%", 100*float64(num)/float64(den))
}

// WriteReport writes res as a readable text report.
func WriteReport(w io.Writer, res *Result) error {
	st := &res.Stats
	var b strings.Builder
	fmt.Fprintf(&b, "Block-cache trace (engine version %d.%d)\n", st.Header.MajorVersion, st.Header.MinorVersion)
	if st.Total.Accesses > 0 && st.LastTimestamp >= st.FirstTimestamp {
		d := time.Duration(st.LastTimestamp-st.FirstTimestamp) * time.Microsecond
		fmt.Fprintf(&b, "  accesses %d over %s, live cache miss ratio %s\n", st.Total.Accesses, d, pct(st.Total.Misses, st.Total.Accesses))
	} else {
		fmt.Fprintf(&b, "  accesses %d\n", st.Total.Accesses)
	}
	fmt.Fprintf(&b, "  distinct blocks %d (%s), accessed once %d (%s of blocks)\n",
		st.UniqueBlocks, FormatBytes(st.UniqueBytes), st.AccessedOnce, pct(st.AccessedOnce, st.UniqueBlocks))
	if len(st.Pinned) > 0 {
		var parts []string
		for _, k := range sortedKeys(st.Pinned) {
			parts = append(parts, fmt.Sprintf("%s %d", k, st.Pinned[k].Accesses))
		}
		fmt.Fprintf(&b, "  pinned blocks read at table open, outside the cache (not counted above): %s\n", strings.Join(parts, ", "))
	}

	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
	group := func(title string, keys []string, cs []*Counter) {
		fmt.Fprintf(&b, "\n%s\n", title)
		fmt.Fprintf(tw, "\t\taccesses\tshare\tlive misses\tmiss ratio\t\n")
		for i, k := range keys {
			c := cs[i]
			fmt.Fprintf(tw, "\t%s\t%d\t%s\t%d\t%s\t\n", k, c.Accesses, pct(c.Accesses, st.Total.Accesses), c.Misses, pct(c.Misses, c.Accesses))
		}
		tw.Flush()
	}
	{
		ks := sortedKeys(st.ByType)
		var names []string
		var cs []*Counter
		for _, k := range ks {
			names, cs = append(names, k.String()), append(cs, st.ByType[k])
		}
		group("By block type", names, cs)
	}
	{
		ks := sortedKeys(st.ByCaller)
		var names []string
		var cs []*Counter
		for _, k := range ks {
			names, cs = append(names, k.String()), append(cs, st.ByCaller[k])
		}
		group("By caller", names, cs)
	}
	{
		ks := sortedKeys(st.ByLevel)
		var names []string
		var cs []*Counter
		for _, k := range ks {
			n := fmt.Sprintf("L%d", k)
			if k < 0 {
				n = "unknown"
			}
			names, cs = append(names, n), append(cs, st.ByLevel[k])
		}
		group("By level", names, cs)
	}

	if len(st.Top) > 0 {
		fmt.Fprintf(&b, "\nTop %d blocks by accesses\n", len(st.Top))
		fmt.Fprintf(tw, "\taccesses\ttype\tlevel\tfile\tsize\t key\n")
		for _, t := range st.Top {
			k := hex.EncodeToString(t.Key)
			if len(k) > 48 {
				k = k[:48] + "..."
			}
			fmt.Fprintf(tw, "\t%d\t%s\tL%d\t%d\t%s\t %s\n", t.Accesses, t.Type.String(), t.Level, t.FileNumber, FormatBytes(int64(t.Size)), k)
		}
		tw.Flush()
	}

	reused := st.ReuseBlocks.Total()
	fmt.Fprintf(&b, "\nReuse distance (%d first accesses not counted, %d reuses)\n", st.Cold, reused)
	fmt.Fprintf(&b, "  in distinct other blocks accessed in between:\n")
	hist := func(h *Histogram, unit func(int64) string) {
		lo, hi := -1, -1
		for i, c := range h.Buckets {
			if c > 0 {
				if lo < 0 {
					lo = i
				}
				hi = i
			}
		}
		if lo < 0 {
			fmt.Fprintf(&b, "    (none)\n")
			return
		}
		var cum int64
		fmt.Fprintf(tw, "\trange\treuses\tshare\tcumulative\t\n")
		for i := lo; i <= hi; i++ {
			c := h.Buckets[i]
			cum += c
			l, u := h.Bounds(i)
			r := "0"
			if i > 0 {
				r = fmt.Sprintf("[%s, %s)", unit(l), unit(u))
			}
			fmt.Fprintf(tw, "\t%s\t%d\t%s\t%s\t\n", r, c, pct(c, reused), pct(cum, reused))
		}
		tw.Flush()
	}
	hist(&st.ReuseBlocks, func(v int64) string { return fmt.Sprint(v) })
	fmt.Fprintf(&b, "  in bytes (those blocks' charges plus the block's own: the LRU size that hits):\n")
	hist(&st.ReuseBytes, FormatBytes)

	if len(res.Curve) > 0 {
		fmt.Fprintf(&b, "\nSimulated miss ratios\n")
		var pols []Policy
		var sizes []int64
		mr := map[Policy]map[int64]Point{}
		for _, p := range res.Curve {
			if mr[p.Policy] == nil {
				mr[p.Policy] = map[int64]Point{}
				pols = append(pols, p.Policy)
			}
			mr[p.Policy][p.Size] = p
			if !slices.Contains(sizes, p.Size) {
				sizes = append(sizes, p.Size)
			}
		}
		slices.Sort(sizes)
		fmt.Fprintf(tw, "\tsize")
		for _, p := range pols {
			fmt.Fprintf(tw, "\t%s", p)
		}
		fmt.Fprintf(tw, "\t\n")
		for _, s := range sizes {
			fmt.Fprintf(tw, "\t%s", FormatBytes(s))
			for _, p := range pols {
				pt := mr[p][s]
				fmt.Fprintf(tw, "\t%s", pct(pt.Misses, pt.Accesses))
			}
			fmt.Fprintf(tw, "\t\n")
		}
		tw.Flush()
		fmt.Fprintf(&b, "  (%d accesses counted per cache)\n", res.Curve[0].Accesses)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func sortedKeys[K int32 | trace.BlockType | trace.Caller](m map[K]*Counter) []K {
	ks := make([]K, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}
