package vfs

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
)

func TestDefaultBasics(t *testing.T) {
	dir := t.TempDir()
	fs := Default
	sub := filepath.Join(dir, "a", "b")
	if err := fs.MkdirAll(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, fs, filepath.Join(sub, "f"), "hello", true)
	if err := fs.Link(filepath.Join(sub, "f"), filepath.Join(sub, "g")); err != nil {
		t.Fatal(err)
	}
	if err := fs.Rename(filepath.Join(sub, "g"), filepath.Join(sub, "h")); err != nil {
		t.Fatal(err)
	}
	names, err := fs.List(sub)
	slices.Sort(names)
	if err != nil || !slices.Equal(names, []string{"f", "h"}) {
		t.Fatalf("List = %v, %v", names, err)
	}
	if got := readFile(t, fs, filepath.Join(sub, "h")); got != "hello" {
		t.Fatalf("read link: %q", got)
	}
	d, err := fs.OpenDir(sub)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Sync(); err != nil {
		t.Fatalf("directory Sync: %v", err)
	}
	d.Close()
	if _, err := fs.OpenDir(filepath.Join(sub, "f")); err == nil {
		t.Fatal("OpenDir of a file succeeded")
	}
	if _, err := fs.Stat(filepath.Join(sub, "nope")); !os.IsNotExist(err) {
		t.Fatalf("Stat missing = %v", err)
	}
	if err := fs.RemoveAll(filepath.Join(dir, "a")); err != nil {
		t.Fatal(err)
	}
}

func TestDefaultLock(t *testing.T) {
	name := filepath.Join(t.TempDir(), "LOCK")
	l, err := Default.Lock(name)
	if err != nil {
		t.Fatal(err)
	}
	// In-process: a second Lock fails, even through another spelling.
	_, err = Default.Lock(filepath.Join(filepath.Dir(name), ".", "LOCK"))
	if !errors.Is(err, ErrLocked) || !strings.Contains(err.Error(), "already held by this process") {
		t.Fatalf("second Lock = %v", err)
	}
	t.Log(err)
	// flock(2) itself excludes a second open file description of this
	// process: the registry is not the only guard (Linux only).
	checkFlockConflict(t, name)
	// Another process cannot take it.
	if out, err := lockInChild(t, name); err == nil || !strings.Contains(out, "resource temporarily unavailable (is another process using the directory?)") {
		t.Fatalf("child Lock while held: err=%v output=%q", err, out)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err == nil {
		t.Fatal("double Close succeeded")
	}
	if out, err := lockInChild(t, name); err != nil {
		t.Fatalf("child Lock after release: %v %s", err, out)
	}
	l, err = Default.Lock(name)
	if err != nil {
		t.Fatalf("Lock after release: %v", err)
	}
	l.Close()
}

// lockInChild runs TestLockChild in a child process to lock name.
func lockInChild(t *testing.T, name string) (string, error) {
	t.Helper()
	if runtime.GOOS != "linux" && runtime.GOOS != "darwin" && runtime.GOOS != "freebsd" {
		t.Skip("flock-based process exclusion only on Unix")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestLockChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), "VFS_LOCK_CHILD="+name)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// TestLockChild is the child half of TestDefaultLock.
func TestLockChild(t *testing.T) {
	name := os.Getenv("VFS_LOCK_CHILD")
	if name == "" {
		t.Skip("only run as a child of TestDefaultLock")
	}
	l, err := Default.Lock(name)
	if err != nil {
		t.Fatal(err)
	}
	l.Close()
}
