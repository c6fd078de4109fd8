package main

import (
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/crin-dev/crin/internal/admin"
)

// writePlugins prints plugins as a table, in the order given (crind's
// invocation order).
func writePlugins(w io.Writer, ps []admin.Plugin) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "INDEX\tNAME\tKIND\tSTATE\tEVENTS\tCALLS\tFAILURES\tLATENCY\tRESTARTS")
	for _, p := range ps {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%d\t%s\t%d\n",
			dash(p.Index), p.Name, dash(p.Kind), state(p), eventList(p.Events), p.Calls, p.Failures, latency(p), p.Restarts)
	}
	return tw.Flush()
}

// state is the plugin's state; a plugin backing off shows the delay and
// the time of its next attempt (--json has its last error).
func state(p admin.Plugin) string {
	if p.State != "backoff" || p.Backoff == "" {
		return dash(p.State)
	}
	s := "backoff " + p.Backoff
	if t, err := time.Parse(time.RFC3339Nano, p.NextAttempt); err == nil {
		s += " until " + t.Local().Format(time.TimeOnly)
	}
	return s
}

// maxEventsWidth keeps the table readable when a plugin subscribes to
// every event; --json has the full list.
const maxEventsWidth = 48

// eventList joins events, cut to about maxEventsWidth with a count of the
// ones left out.
func eventList(events []string) string {
	if len(events) == 0 {
		return "-"
	}
	var b strings.Builder
	for i, e := range events {
		if i > 0 && b.Len()+1+len(e) > maxEventsWidth {
			fmt.Fprintf(&b, ",+%d more", len(events)-i)
			break
		}
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(e)
	}
	return b.String()
}

// latency shows the mean call latency rounded for reading, or "-" before
// the first call.
func latency(p admin.Plugin) string {
	if p.Calls == 0 {
		return "-"
	}
	d, err := time.ParseDuration(p.MeanLatency)
	if err != nil {
		return dash(p.MeanLatency)
	}
	switch {
	case d >= time.Second:
		d = d.Round(time.Millisecond)
	case d >= time.Millisecond:
		d = d.Round(10 * time.Microsecond)
	default:
		d = d.Round(time.Microsecond)
	}
	return d.String()
}

// writeOwners prints which plugin owns which field, sorted by field.
func writeOwners(w io.Writer, owners map[string]string) error {
	fields := make([]string, 0, len(owners))
	for f := range owners {
		fields = append(fields, f)
	}
	slices.Sort(fields)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "FIELD\tPLUGIN")
	for _, f := range fields {
		fmt.Fprintf(tw, "%s\t%s\n", printable(f), printable(owners[f]))
	}
	return tw.Flush()
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// printable keeps a field or plugin name in one table cell: names come
// from plugins (env and annotation keys), so control characters are shown
// escaped rather than printed.
func printable(s string) string {
	var b strings.Builder
	for _, r := range s {
		if r < ' ' || r == 0x7f {
			q := strconv.QuoteRune(r)
			b.WriteString(q[1 : len(q)-1])
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}
