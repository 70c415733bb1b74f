package base

import (
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
)

// FileNum names a file of the DB: WALs, SSTs, manifests and blob files draw
// from one counter.
type FileNum uint64

func (n FileNum) String() string { return fmt.Sprintf("%06d", uint64(n)) }

// FileType is the kind of a file in the DB directory.
type FileType int

// The file types of a DB directory.
const (
	FileTypeLog FileType = iota
	FileTypeTable
	FileTypeManifest
	FileTypeCurrent
	FileTypeLock
	FileTypeTemp
	FileTypeBlob
	FileTypeOptions
)

// MakeFilename returns the base name of a file of type ft and number n.
func MakeFilename(ft FileType, n FileNum) string {
	switch ft {
	case FileTypeLog:
		return n.String() + ".log"
	case FileTypeTable:
		return n.String() + ".sst"
	case FileTypeManifest:
		return "MANIFEST-" + n.String()
	case FileTypeCurrent:
		return "CURRENT"
	case FileTypeLock:
		return "LOCK"
	case FileTypeTemp:
		return n.String() + ".dbtmp"
	case FileTypeBlob:
		return n.String() + ".blob"
	case FileTypeOptions:
		return "OPTIONS-" + n.String()
	}
	panic(fmt.Sprintf("base: unknown file type %d", ft))
}

// MakeFilepath joins dir and MakeFilename(ft, n).
func MakeFilepath(dir string, ft FileType, n FileNum) string {
	return filepath.Join(dir, MakeFilename(ft, n))
}

// ParseFilename parses a base name produced by MakeFilename. ok is false for
// names the engine did not make.
func ParseFilename(name string) (ft FileType, n FileNum, ok bool) {
	name = filepath.Base(name)
	switch {
	case name == "CURRENT":
		return FileTypeCurrent, 0, true
	case name == "LOCK":
		return FileTypeLock, 0, true
	case strings.HasPrefix(name, "MANIFEST-"):
		u, err := strconv.ParseUint(name[len("MANIFEST-"):], 10, 64)
		if err != nil {
			return 0, 0, false
		}
		return FileTypeManifest, FileNum(u), true
	case strings.HasPrefix(name, "OPTIONS-"):
		u, err := strconv.ParseUint(name[len("OPTIONS-"):], 10, 64)
		if err != nil {
			return 0, 0, false
		}
		return FileTypeOptions, FileNum(u), true
	}
	i := strings.IndexByte(name, '.')
	if i <= 0 {
		return 0, 0, false
	}
	u, err := strconv.ParseUint(name[:i], 10, 64)
	if err != nil {
		return 0, 0, false
	}
	switch name[i+1:] {
	case "log":
		return FileTypeLog, FileNum(u), true
	case "sst":
		return FileTypeTable, FileNum(u), true
	case "dbtmp":
		return FileTypeTemp, FileNum(u), true
	case "blob":
		return FileTypeBlob, FileNum(u), true
	}
	return 0, 0, false
}
