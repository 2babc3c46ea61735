//go:build !failpoints

package failpoint

// Inject does nothing: this binary was built without failpoints.
func Inject(string) {}

// Enabled reports whether this binary was built with failpoints.
const Enabled = false
