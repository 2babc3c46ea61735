package console

import (
	"fmt"

	fulfillmentv1 "github.com/fulfillplatform/fulfillment/gen/fulfillment/v1"
)

// The overview's activity charts: one small bar chart per series, drawn as
// inline SVG on the server (no script, no style attribute: the bars'
// colours come from console.css).
const (
	chartBarWidth = 8
	chartBarGap   = 2
	chartHeight   = 48
)

type activityChart struct {
	// Label names the series; Class is its CSS class.
	Label, Class string
	// Total and Peak summarize the window; Minutes is its length.
	Total, Peak int64
	Minutes     int
	Width       int
	Height      int
	Bars        []chartBar
	// From and To are the first and last minute, as HH:MM UTC.
	From, To string
}

type chartBar struct {
	X, Y, W, H int
	// Title is the bar's tooltip: its minute and count.
	Title string
}

// Summary says the chart in words, for screen readers.
func (c activityChart) Summary() string {
	return fmt.Sprintf("%s per minute, %s to %s UTC: %d in all, at most %d in a minute", c.Label, c.From, c.To, c.Total, c.Peak)
}

// activityCharts draws the three series of an activity window.
func activityCharts(a *fulfillmentv1.GetActivityResponse) []activityChart {
	ms := a.GetMinutes()
	if len(ms) == 0 {
		return nil
	}
	series := []struct {
		label, class string
		n            func(*fulfillmentv1.ActivityMinute) int64
	}{
		{"Events received", "s-events", (*fulfillmentv1.ActivityMinute).GetEventsReceived},
		{"Orders fulfilled", "s-fulfilled", (*fulfillmentv1.ActivityMinute).GetOrdersFulfilled},
		{"Messages delivered", "s-delivered", (*fulfillmentv1.ActivityMinute).GetMessagesDelivered},
	}
	out := make([]activityChart, 0, len(series))
	for _, s := range series {
		c := activityChart{Label: s.label, Class: s.class, Minutes: len(ms), Height: chartHeight,
			Width: len(ms) * (chartBarWidth + chartBarGap),
			From:  ms[0].GetStartTime().AsTime().UTC().Format("15:04"), To: ms[len(ms)-1].GetStartTime().AsTime().UTC().Format("15:04")}
		for _, m := range ms {
			n := s.n(m)
			c.Total += n
			c.Peak = max(c.Peak, n)
		}
		for i, m := range ms {
			n := s.n(m)
			h := 0
			if c.Peak > 0 {
				h = int(n * chartHeight / c.Peak)
			}
			if n > 0 && h == 0 {
				h = 1 // a minute with anything shows
			}
			c.Bars = append(c.Bars, chartBar{X: i * (chartBarWidth + chartBarGap), Y: chartHeight - h, W: chartBarWidth, H: h,
				Title: fmt.Sprintf("%s UTC: %d", m.GetStartTime().AsTime().UTC().Format("15:04"), n)})
		}
		out = append(out, c)
	}
	return out
}
