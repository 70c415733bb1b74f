package cluster

import (
	"log/slog"
	"os"
)

// WarnIfReadableByOthers logs a warning if the file name, which holds a
// secret (what), can be read or written by users other than its owner, as
// ssh does for a private key. It never logs the contents. A file that
// cannot be stat'ed is left to the caller's read to report.
func WarnIfReadableByOthers(log *slog.Logger, name, what string) {
	st, err := os.Stat(name)
	if err != nil {
		return
	}
	if perm := st.Mode().Perm(); perm&0o077 != 0 {
		log.Warn("cluster: "+what+" file is accessible to other users; it holds secret keys: chmod 600 it",
			"file", name, "mode", perm.String())
	}
}
