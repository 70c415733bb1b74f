//go:build unix && !linux

package offheap

func adviseHugePages([]byte) {}
