package lab

import (
	"fmt"
	"math"
)

// Ratio formats a ratio as the lab's report shows it ("2.00×"); the
// loopback rig's report shows its own figures the same way.
func Ratio(x float64) string {
	if math.IsNaN(x) {
		return "–"
	}
	return fmt.Sprintf("%.2f×", x)
}

// Seconds formats seconds as the report shows them: "1.50 s", "150 ms",
// "1.5 ms".
func Seconds(s float64) string {
	switch {
	case math.IsNaN(s):
		return "–"
	case s >= 1:
		return fmt.Sprintf("%.2f s", s)
	case s >= 0.1:
		return fmt.Sprintf("%.0f ms", s*1e3)
	}
	return fmt.Sprintf("%.1f ms", s*1e3)
}

// Percent formats a share x in [0, 1] as a percentage with digits
// decimals.
func Percent(x float64, digits int) string {
	if math.IsNaN(x) {
		return "–"
	}
	return fmt.Sprintf("%.*f%%", digits, 100*x)
}
