// tsdb_backfill writes the Prometheus TSDB blocks of bench/prometheus_pages.py directly, with the
// same tsdb.BlockWriter that `promtool tsdb create-blocks-from openmetrics` uses, without the
// OpenMetrics text in between (403 million samples are ~40 GB of text, and promtool 2.42 parses its
// whole input file again for every block window). The values are the bench's: the Python side
// passes the fleet and the series' formulas are the same as bench/prometheus_pages.py's.
//
//	tsdb_backfill -spec spec.json -out DIR [-parallel 2]
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/go-kit/log"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/tsdb"
)

type gpu struct {
	UUID     string `json:"uuid"`
	Hostname string `json:"hostname"`
	Index    int    `json:"index"`
	Idle     bool   `json:"idle"`
}

type queue struct {
	Labels map[string]string `json:"labels"`
	GPUs   float64           `json:"gpus"`
}

type spec struct {
	Start        int64   `json:"start"`         // unix seconds: first queue sample
	HistoryStart int64   `json:"history_start"` // unix seconds: first per-GPU sample
	End          int64   `json:"end"`           // unix seconds: last sample (inclusive)
	Step         int64   `json:"step"`
	BlockHours   int64   `json:"block_hours"`
	GPUs         []gpu   `json:"gpus"`
	Queues       []queue `json:"queues"`
}

// round is Python's round(x, digits) for the values used here (none falls on a half).
func round(x float64, digits int) float64 {
	v, _ := strconv.ParseFloat(strconv.FormatFloat(x, 'f', digits, 64), 64)
	return v
}

// activity is bench/prometheus_pages.py's activity(): busy GPUs wander between 30 and 90 %.
func activity(table *[101]float64, number int64, t int64, idle bool) float64 {
	if idle {
		return 0.01
	}
	return table[(number*7919+t/60)%101]
}

func first(from, step int64) int64 { return from - from%step }

type window struct{ mint, maxt int64 } // unix seconds, [mint, maxt)

func writeBlock(s *spec, table *[101]float64, gpuLabels, queueLabels []labels.Labels, w window, out string) (int64, error) {
	// Twice the window, as promtool does: the head accepts samples down to its newest minus half
	// its chunk range, and series are appended one after another across the whole window.
	writer, err := tsdb.NewBlockWriter(log.NewNopLogger(), out, 2*s.BlockHours*3600*1000)
	if err != nil {
		return 0, err
	}
	defer writer.Close()
	ctx := context.Background()
	app := writer.Appender(ctx)
	pending, total := 0, int64(0)
	add := func(lset labels.Labels, from int64, value func(int64) float64) error {
		start := first(from, s.Step)
		for start < w.mint {
			start += s.Step
		}
		for t := start; t < w.maxt && t <= s.End; t += s.Step {
			if _, err := app.Append(0, lset, t*1000, value(t)); err != nil {
				return err
			}
			pending++
			total++
			if pending >= 50000 {
				if err := app.Commit(); err != nil {
					return err
				}
				app = writer.Appender(ctx)
				pending = 0
			}
		}
		return nil
	}
	for n, g := range s.GPUs {
		number, idle := int64(n), g.Idle
		if err := add(gpuLabels[n], s.HistoryStart, func(t int64) float64 { return activity(table, number, t, idle) }); err != nil {
			return 0, err
		}
	}
	for i, q := range s.Queues {
		base := q.GPUs * 0.55
		if err := add(queueLabels[i], s.Start, func(t int64) float64 {
			return round(base*(0.8+0.2*float64((t/3600)%5)/4), 2)
		}); err != nil {
			return 0, err
		}
	}
	if err := app.Commit(); err != nil {
		return 0, err
	}
	if total == 0 {
		return 0, nil
	}
	if _, err := writer.Flush(ctx); err != nil {
		return 0, err
	}
	return total, nil
}

func main() {
	specPath := flag.String("spec", "", "the fleet and time range (JSON, written by bench/prometheus_pages.py)")
	out := flag.String("out", "", "the TSDB directory to write blocks into")
	parallel := flag.Int("parallel", 2, "blocks written at once")
	flag.Parse()
	raw, err := os.ReadFile(*specPath)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	var s spec
	if err := json.Unmarshal(raw, &s); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	var table [101]float64
	for k := range table {
		table[k] = round(0.3+0.6*(float64(k)/100), 3)
	}
	gpuLabels := make([]labels.Labels, len(s.GPUs))
	for n, g := range s.GPUs {
		gpuLabels[n] = labels.FromStrings("__name__", "fleetdeck:gpu_sm_active:ratio", "UUID", g.UUID,
			"Hostname", g.Hostname, "gpu", strconv.Itoa(g.Index))
	}
	queueLabels := make([]labels.Labels, len(s.Queues))
	for i, q := range s.Queues {
		pairs := []string{"__name__", "fleetdeck:queue_flavor_utilised_gpus:sum"}
		for k, v := range q.Labels {
			pairs = append(pairs, k, v)
		}
		queueLabels[i] = labels.FromStrings(pairs...)
	}
	block := s.BlockHours * 3600
	var windows []window
	earliest := s.Start
	if s.HistoryStart < earliest {
		earliest = s.HistoryStart
	}
	for m := first(first(earliest, s.Step), block); m <= s.End; m += block {
		windows = append(windows, window{m, m + block})
	}
	started := time.Now()
	jobs := make(chan window)
	var mu sync.Mutex
	var samples int64
	var failed error
	var wg sync.WaitGroup
	for i := 0; i < int(math.Max(1, float64(*parallel))); i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for w := range jobs {
				n, err := writeBlock(&s, &table, gpuLabels, queueLabels, w, *out)
				mu.Lock()
				samples += n
				if err != nil && failed == nil {
					failed = err
				}
				mu.Unlock()
			}
		}()
	}
	for _, w := range windows {
		jobs <- w
	}
	close(jobs)
	wg.Wait()
	if failed != nil {
		fmt.Fprintln(os.Stderr, failed)
		os.Exit(1)
	}
	fmt.Printf("%d samples in %d blocks of %d h in %.1f s\n", samples, len(windows), s.BlockHours,
		time.Since(started).Seconds())
}
