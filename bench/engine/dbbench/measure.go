package dbbench

import (
	"bufio"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
)

// sink defeats dead-code elimination of touch. It is stored atomically
// because several readers touch values at once (a plain store is a data
// race); a store, not an add, so it costs next to nothing.
var sink atomic.Uint32

// touch reads a value's bytes (first and last), so that an engine that
// returns a value lazily (Badger's value log is mmapped) has to produce it.
func touch(v []byte) {
	if len(v) > 0 {
		sink.Store(uint32(v[0] ^ v[len(v)-1]))
	}
}

// WriteBytesSource says where DiskWriteBytes come from.
const WriteBytesSource = "/proc/self/io write_bytes - cancelled_write_bytes " +
	"(bytes this process caused to be sent to the block layer, page cache " +
	"writeback and mmap included, minus dirty data truncated before writeback)"

// diskWriteBytes returns the process's write_bytes - cancelled_write_bytes
// from /proc/self/io, or -1 where that is unavailable.
func diskWriteBytes() int64 {
	f, err := os.Open("/proc/self/io")
	if err != nil {
		return -1
	}
	defer f.Close()
	var wb, cwb int64 = -1, 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ": ")
		if !ok {
			continue
		}
		n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		if err != nil {
			continue
		}
		switch k {
		case "write_bytes":
			wb = n
		case "cancelled_write_bytes":
			cwb = n
		}
	}
	if wb < 0 {
		return -1
	}
	return wb - cwb
}

// usage is the process's CPU time, peak RSS and minor page faults so far.
type usage struct {
	cpu       time.Duration
	maxRSSKiB int64
	minFlt    int64
}

func getUsage() usage {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return usage{}
	}
	return usage{
		cpu:       time.Duration(ru.Utime.Nano() + ru.Stime.Nano()),
		maxRSSKiB: ru.Maxrss, // KiB on Linux
		minFlt:    ru.Minflt,
	}
}

// DirBytes returns the disk space allocated to the files under dir
// (st_blocks × 512, so sparse and preallocated files count for what they
// occupy), or the sum of sizes where st_blocks is unavailable.
func DirBytes(dir string) int64 {
	var total int64
	filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return nil
		}
		if st, ok := info.Sys().(*syscall.Stat_t); ok {
			total += st.Blocks * 512
		} else {
			total += info.Size()
		}
		return nil
	})
	return total
}
