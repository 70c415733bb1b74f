//go:build invariants || race

package version

// invariantsEnabled turns on O(files) self-checks: every new version's
// ordering is verified before it is installed.
const invariantsEnabled = true
