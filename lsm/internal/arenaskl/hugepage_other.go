//go:build unix && !linux

package arenaskl

// adviseHugePages does nothing: transparent huge pages are Linux's.
func adviseHugePages([]byte) {}
