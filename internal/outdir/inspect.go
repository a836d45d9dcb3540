package outdir

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// The reading of a folder for `canopy doctor --out`: what the transaction
// itself tells (in use, damaged, a publication or a --force run stopped
// half way, the fault a failed run left). It only reads: it neither takes
// the lock nor tidies.

// Busy is "in use by a running canopy job (HOLDER); " when a job holds
// dir's lock, else "".
func Busy(dir string) string {
	f, err := os.Open(filepath.Join(dir, LockName))
	if err != nil {
		return ""
	}
	defer f.Close()
	h := ReadHolder(f)
	if syscall.Flock(int(f.Fd()), syscall.LOCK_SH|syscall.LOCK_NB) != nil {
		return fmt.Sprintf("in use by a running canopy job (%s); ", h)
	}
	return ""
}

// Unsettled tells whether dir's transaction is damaged, or stopped between
// the steps the next start finishes or undoes: a journal that cannot be
// read, a set-aside run whose list cannot be read, a --force run stopped
// while publishing or before it committed, a publication stopped half
// way. ok false: none of these (a published run, or one not yet
// publishing). The sentence is doctor's, the exit code always
// ExitInternal.
func Unsettled(dir string) (msg string, ok bool) {
	has := func(n string) bool { _, err := os.Stat(filepath.Join(dir, n)); return err == nil }
	if _, _, err := ReadJournal(dir); err != nil {
		return fmt.Sprintf("damaged: %v; canopy cannot finish or undo that publication and refuses the folder (exit 1)", err), true
	}
	if b, err := os.ReadFile(filepath.Join(dir, PreviousDir, MovedList)); has(PreviousDir) && (err == nil && json.Unmarshal(b, new([]string)) != nil || err != nil && !os.IsNotExist(err)) {
		return fmt.Sprintf("damaged: the run set aside in %s has an unreadable %s; canopy cannot put it back and refuses the folder (exit 1): keep what you need of it and remove %s, or choose another --out", PreviousDir, MovedList, PreviousDir), true
	}
	if has(PreviousDir) && has(JournalName) {
		return "a --force run was stopped while publishing its complete outputs; the next canopy run in this folder finishes the publication and removes the previous run set aside in " + PreviousDir, true
	}
	if has(PreviousDir) {
		return "a --force run stopped before it committed (nothing of it is kept); its previous run is set aside in " + PreviousDir + " and the next canopy run in this folder puts it back", true
	}
	return "", false
}

// Publishing tells whether a publication of dir was stopped half way (its
// journal is there): the next start finishes it.
func Publishing(dir string) bool {
	_, err := os.Stat(filepath.Join(dir, JournalName))
	return err == nil
}

// ReadRegular reads a regular file of at most max bytes (a FIFO or a
// link put in a file's place is refused, not followed or read).
func ReadRegular(path string, max int64) ([]byte, error) {
	st, err := os.Lstat(path)
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() || st.Size() > max {
		return nil, fmt.Errorf("%s is not a regular file of at most %d bytes", filepath.Base(path), max)
	}
	return os.ReadFile(path)
}
