// Package crashtest kills a process writing to an lsm DB with SIGKILL and
// checks what survives.
//
// TestKill9 re-executes the test binary as a child (environment variable
// CAIRN_CRASH_CHILD names the DB directory, CAIRN_CRASH_SEED the round's
// seed). The child opens the DB on the operating system's file system,
// prints "ready", and runs a workload that is a deterministic function of
// the seed: puts, deletes, range deletes and batches over 500 keys (90%,
// 50% or 5% of them synced, chosen per round), a Flush every 97 ops and a
// Compact of a random range every 331,
// with small memtables and L0 compaction at two files so that background
// flushes and compactions run most of the time. After op i returns it prints
// "ack i"; before a compaction it prints "compact i".
//
// The parent kills the child with SIGKILL after a random 5–300 ms (or, in a
// quarter of the rounds, right after a "compact" line), reads every line
// the child wrote, opens the DB itself and compares its full contents (an
// iterator scan and a Get of every key) with the model: the state must be
// exactly the one after every acknowledged op, or that plus the op that was
// in flight (a batch is atomic, so the in-flight op is applied wholly or not
// at all). Unsynced writes are held to the same standard: a process crash
// keeps what the engine handed to the operating system, and the engine
// writes the WAL before acknowledging. If no "ready" was read, the child
// was killed during Open and the state must be unchanged. The recovered
// state is the start of the next round, on the same directory, so
// recovery of recovered DBs is tested too.
//
// Values carry a tag naming the seed and op that wrote them, so a wrong
// value found after a crash names its origin. On failure the DB directory
// is copied somewhere that outlives the test and its path printed.
//
// TestKill9WALBuffered runs the same rounds with Options.WALBufferedWrites
// and checks its weaker guarantee: the recovered state must be the one
// after the first k ops for some k from the last durable op (a Sync write
// or a Flush, acknowledged) to the last acknowledged one plus the op in
// flight: a prefix, never a gap, never a partial batch. Children of even
// seeds run with GOMAXPROCS=1, so that the WAL's background writer lags
// and kills find acknowledged bytes still in memory; the test logs how
// many rounds lost acknowledged ops.
//
// Flags: -rounds N (default 20), -seed N (the base seed; round r uses
// seed+r). Kill timing is not reproducible, so a seed replays the
// workloads but not necessarily the failure; the preserved directory is
// the primary evidence.
package crashtest
