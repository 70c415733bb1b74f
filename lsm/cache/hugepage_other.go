//go:build unix && !linux

package cache

func adviseHugePages([]byte) {}
