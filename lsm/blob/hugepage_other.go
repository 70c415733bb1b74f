//go:build unix && !linux

package blob

func adviseHugePages([]byte) {}
