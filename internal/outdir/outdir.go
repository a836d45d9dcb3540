// Package outdir is the output folder's transaction: rank 0's lock, the
// previous run set aside by --force, staging, publishing a set of files
// through a journal, the tidy-up of a killed run's leftovers, a resumable
// run's manifest and its shared-filesystem probe, and the sha256 helpers
// the manifests and reports record. The names of the outputs are declared
// by the commands (Names); this package knows none of them.
package outdir

import (
	"bufio"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/canopy-hpc/canopy/internal/errkind"
)

// The output folder's safety rules (docs/design.md, "Output folder"):
//
//   - one run at a time: rank 0 holds an exclusive lock on OUT/.canopy.lock
//     for the whole run; a second run is refused (exit 2) naming the holder;
//   - nothing lost: --force sets the previous run aside in
//     OUT/.canopy-previous and removes it only once the new run has passed
//     every check and saved its first part record (eval), or once the
//     journal of its outputs is written (predict, predict --tile, eval
//     --tile: the journal is the commit); a failure before that puts it
//     back (at once, or at the next start when the job was killed), a kill
//     after it is rolled forward and the previous run removed;
//   - leftovers (temporary files, probe files, a half-restored run) are
//     cleaned up at the next start, under the lock;
//   - report.json, predictions.csv and results.csv are published as one
//     set through a journal (OUT/.canopy-publish.json).
const (
	LockName      = ".canopy.lock"
	PreviousDir   = ".canopy-previous"
	MovedList     = "moved.json"
	JournalName   = ".canopy-publish.json"
	DiscardPrefix = ".canopy-discard-"
	FaultPrefix   = ".canopy-fault"
)

// Holder is what the lock file says about the run holding it.
type Holder struct {
	Job     string `json:"job"`
	Host    string `json:"host"`
	PID     int    `json:"pid"`
	Started string `json:"started"`
}

func (h Holder) String() string {
	if h.PID == 0 {
		return "holder unknown"
	}
	return fmt.Sprintf("job %s on host %s, pid %d, since %s", h.Job, h.Host, h.PID, h.Started)
}

// jobID names the batch job this process belongs to ("none" outside one).
func jobID() string {
	for _, k := range []string{"SLURM_JOB_ID", "PBS_JOBID", "LSB_JOBID", "JOB_ID"} {
		if v := os.Getenv(k); v != "" {
			return v
		}
	}
	return "none"
}

// Lock is rank 0's exclusive hold on an output folder.
type Lock struct {
	f     *os.File
	flock bool // false where the filesystem has no flock (the content decides)
}

// TakeLock creates dir if needed and takes its lock. flock(2) is the lock:
// the kernel (or the NFS server) drops it when the holder dies, so a lock
// left by a killed run is stale by construction and is taken over. Where
// the filesystem has no flock, a non-empty lock file is held unless it
// names a process of this host that no longer runs.
func TakeLock(dir string) (*Lock, error) {
	// --out naming a file (or a path through one) is a usage error, not
	// an I/O failure of canopy's own files
	if st, err := os.Stat(dir); err == nil && !st.IsDir() {
		kind := "a file"
		if !st.Mode().IsRegular() {
			kind = "a " + st.Mode().Type().String() + " entry"
		}
		return nil, errkind.Usage("jobs: --out %s is %s, not a folder; choose a folder", dir, kind)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		if errors.Is(err, syscall.ENOTDIR) {
			return nil, errkind.Usage("jobs: --out %s: a part of the path is a file, not a folder: %w", dir, err)
		}
		return nil, errkind.IO("jobs: output folder: %w", err)
	}
	path := filepath.Join(dir, LockName)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, errkind.IO("jobs: output folder lock: %w", err)
	}
	held := ReadHolder(f)
	l := &Lock{f: f, flock: true}
	host, _ := os.Hostname()
	switch err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); {
	case err == nil:
	case errors.Is(err, syscall.EWOULDBLOCK):
		f.Close()
		return nil, errkind.Usage("jobs: --out %s is in use by another canopy run (%s); wait for it to end or choose another --out", dir, held)
	case errors.Is(err, syscall.ENOLCK), errors.Is(err, syscall.EOPNOTSUPP), errors.Is(err, syscall.ENOSYS), errors.Is(err, syscall.EINVAL):
		l.flock = false
		if held.PID != 0 && !(held.Host == host && !pidAlive(held.PID)) {
			f.Close()
			return nil, errkind.Usage("jobs: --out %s is in use by another canopy run (%s); this filesystem has no flock, so if that run has ended remove %s", dir, held, path)
		}
	default:
		f.Close()
		return nil, errkind.IO("jobs: output folder lock: %w", err)
	}
	me := Holder{Job: jobID(), Host: host, PID: os.Getpid(), Started: time.Now().UTC().Format(time.RFC3339)}
	b, _ := json.Marshal(me)
	if err := f.Truncate(0); err == nil {
		_, err = f.WriteAt(append(b, '\n'), 0)
	}
	if err == nil {
		err = f.Sync()
	}
	if err != nil {
		l.Release()
		return nil, errkind.IO("jobs: output folder lock: %w", err)
	}
	return l, nil
}

// ReadHolder reads what a lock file says about its holder.
func ReadHolder(f *os.File) Holder {
	var h Holder
	b, _ := io.ReadAll(io.LimitReader(f, 4096))
	json.Unmarshal(b, &h)
	return h
}

func pidAlive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// Release empties the lock file (the no-flock rule's "free") and unlocks.
func (l *Lock) Release() {
	if l == nil || l.f == nil {
		return
	}
	l.f.Truncate(0)
	if l.flock {
		syscall.Flock(int(l.f.Fd()), syscall.LOCK_UN)
	}
	l.f.Close()
	l.f = nil
}

// ManifestFile is a resumable run's manifest (its inputs and settings).
const ManifestFile = "manifest.json"

// Names are the entries of OUT the commands write, declared by them (this
// package knows none): any of them in --out marks a previous run.
type Names struct {
	// Reports are the files a run publishes; a temporary of one
	// (".NAME.tmp*") is a leftover.
	Reports []string
	// Others are the other entries that mark a run (the part files'
	// folder, per-raster outputs); the manifest is this package's own.
	Others []string
}

// all are the entries of OUT that mark a previous run.
func (n Names) all() []string {
	return append(append(append([]string(nil), n.Reports...), ManifestFile), n.Others...)
}

// Present are the entries of n in dir that mark a previous run.
func (n Names) Present(dir string) []string {
	var present []string
	for _, f := range n.all() {
		if _, err := os.Lstat(filepath.Join(dir, f)); err == nil {
			present = append(present, f)
		}
	}
	return present
}

// Run is rank 0's hold on the output folder for one run.
type Run struct {
	dir       string
	lock      *Lock
	names     Names
	aside     bool // a previous run is set aside (--force)
	committed bool
	probe     string
}

// Open locks dir and tidies what an earlier run left half done.
func Open(dir string, names Names) (*Run, error) {
	if dir == "" {
		return nil, errkind.Usage("jobs: --out is empty")
	}
	l, err := TakeLock(dir)
	if err != nil {
		return nil, err
	}
	o := &Run{dir: dir, lock: l, names: names}
	if err := Tidy(dir, names); err != nil {
		l.Release()
		return nil, err
	}
	return o, nil
}

// Commit ends the previous run's reprieve: the new run has passed every
// check and saved work of its own.
func (o *Run) Commit() error {
	if o == nil || !o.aside || o.committed {
		return nil
	}
	o.committed = true
	if err := Discard(o.dir, PreviousDir); err != nil {
		return fmt.Errorf("jobs: --force: removing the previous run: %w", err)
	}
	return nil
}

// Aside reports whether a previous run is set aside (--force) until this
// one commits.
func (o *Run) Aside() bool { return o.aside }

// Finish ends the run: a run that failed before it committed puts the
// previous run back; the probe file goes; the lock is released.
func (o *Run) Finish(err error) (restored bool) {
	if o == nil {
		return false
	}
	if err != nil && o.aside && !o.committed {
		restored = RestorePrevious(o.dir, o.names) == nil
	}
	defer o.lock.Release()
	if o.probe != "" {
		os.Remove(filepath.Join(o.dir, probeName(o.probe)))
	}
	return restored
}

// Nonce is 16 random hex digits (a temporary name, a probe).
func Nonce() string {
	var b [8]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Discard renames OUT/name to a discard folder (one atomic step) and
// removes it.
func Discard(dir, name string) error {
	trash := filepath.Join(dir, DiscardPrefix+Nonce())
	if err := os.Rename(filepath.Join(dir, name), trash); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return err
	}
	outStep("discard " + name)
	return os.RemoveAll(trash)
}

// SetAside moves the previous run's entries into OUT/.canopy-previous. The
// list of entries is written first, so restorePrevious can finish a move
// or a restore that a kill cut short.
func SetAside(dir string, names []string) error {
	prev := filepath.Join(dir, PreviousDir)
	if err := os.MkdirAll(prev, 0o755); err != nil {
		return errkind.IO("jobs: --force: %w", err)
	}
	b, _ := json.Marshal(names)
	if err := WriteAtomic(prev, MovedList, func(w io.Writer) error { _, err := w.Write(b); return err }); err != nil {
		return errkind.IO("jobs: --force: %w", err)
	}
	for _, n := range names {
		if err := os.Rename(filepath.Join(dir, n), filepath.Join(prev, n)); err != nil {
			return errkind.IO("jobs: --force: setting the previous run aside: %w", err)
		}
		outStep("set aside " + n)
	}
	if err := SyncDir(dir); err != nil {
		return errkind.IO("jobs: --force: setting the previous run aside: %w", err)
	}
	return nil
}

// RestorePrevious puts a set-aside run back: entries of the new run go,
// the listed entries return. Running it again after a kill finishes it.
func RestorePrevious(dir string, names Names) error {
	prev := filepath.Join(dir, PreviousDir)
	b, err := os.ReadFile(filepath.Join(prev, MovedList))
	if errors.Is(err, fs.ErrNotExist) {
		// nothing was moved yet (the list comes first), or no run is aside
		return os.RemoveAll(prev)
	}
	if err != nil {
		return errkind.IO("jobs: restoring the previous run: %w", err)
	}
	var moved []string
	if err := json.Unmarshal(b, &moved); err != nil {
		return errkind.IO("jobs: restoring the previous run: %s/%s is damaged (%w): keep what you need of it and remove %s, or choose another --out", PreviousDir, MovedList, err, PreviousDir)
	}
	if err := abandonPublication(dir); err != nil {
		return err
	}
	was := map[string]bool{}
	for _, n := range moved {
		was[n] = true
	}
	for _, n := range names.all() {
		cur, old := filepath.Join(dir, n), filepath.Join(prev, n)
		_, oerr := os.Lstat(old)
		if was[n] && oerr != nil {
			continue // put back already
		}
		if _, err := os.Lstat(cur); err == nil {
			if err := Discard(dir, n); err != nil {
				return errkind.IO("jobs: restoring the previous run: %w", err)
			}
		}
		if was[n] {
			if err := os.Rename(old, cur); err != nil {
				return errkind.IO("jobs: restoring the previous run: %w", err)
			}
		}
	}
	if err := SyncDir(dir); err != nil {
		return errkind.IO("jobs: restoring the previous run: %w", err)
	}
	return os.RemoveAll(prev)
}

// Tidy runs under the lock, before anything else touches the folder:
// it finishes an interrupted publication, puts back a run that an earlier
// --force set aside and never replaced, and removes temporary files,
// probe files, fault markers, the claim of an interruption's line and
// discard folders.
func Tidy(dir string, names Names) error {
	if err := rollForward(dir); err != nil {
		return err
	}
	if err := RestorePrevious(dir, names); err != nil {
		return err
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return errkind.IO("jobs: output folder: %w", err)
	}
	for _, e := range ents {
		if isLeftover(e.Name(), names) {
			if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
				return errkind.IO("jobs: removing a leftover: %w", err)
			}
		}
	}
	return nil
}

func isLeftover(name string, names Names) bool {
	for _, f := range append([]string{ManifestFile, JournalName}, names.Reports...) {
		if strings.HasPrefix(name, "."+f+".tmp") || strings.HasPrefix(name, f+".tmp") {
			return true
		}
	}
	for _, p := range []string{".canopy-probe-", DiscardPrefix, FaultPrefix, SaidName} {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

// Staged is a file written and synced under a temporary name in the
// output folder, waiting to be published.
type Staged struct {
	Tmp    string `json:"tmp"`
	Name   string `json:"name"`
	SHA256 string `json:"-"`
}

// Stage writes name's content under a temporary name in dir, synced, and
// returns it with the sha256 of its bytes.
func Stage(dir, name string, fill func(io.Writer) error) (Staged, error) {
	f, err := os.CreateTemp(dir, "."+name+".tmp*")
	if err != nil {
		return Staged{}, fmt.Errorf("jobs: %w", err)
	}
	tmp := f.Name()
	fail := func(err error) (Staged, error) {
		f.Close()
		os.Remove(tmp)
		return Staged{}, fmt.Errorf("jobs: write %s: %w", name, err)
	}
	h := newDigest()
	bw := bufio.NewWriterSize(io.MultiWriter(f, h), 1<<20)
	if err := fill(bw); err != nil {
		return fail(err)
	}
	if err := bw.Flush(); err != nil {
		return fail(err)
	}
	if err := f.Sync(); err != nil {
		return fail(err)
	}
	if err := f.Chmod(0o644); err != nil { // CreateTemp makes 0600
		return fail(err)
	}
	if err := f.Close(); err != nil {
		os.Remove(tmp)
		return Staged{}, fmt.Errorf("jobs: close %s: %w", name, err)
	}
	outStep("stage " + name)
	return Staged{Tmp: filepath.Base(tmp), Name: name, SHA256: digestHex(h)}, nil
}

// Unstage removes the staged files of set from dir (a set that will not
// be published).
func Unstage(dir string, set []Staged) {
	for _, s := range set {
		os.Remove(filepath.Join(dir, s.Tmp))
	}
}

// WriteAtomic writes one file: staged, then renamed into place.
func WriteAtomic(dir, name string, fill func(io.Writer) error) error {
	s, err := Stage(dir, name, fill)
	if err != nil {
		return err
	}
	if err := os.Rename(filepath.Join(dir, s.Tmp), filepath.Join(dir, name)); err != nil {
		os.Remove(filepath.Join(dir, s.Tmp))
		return fmt.Errorf("jobs: %w", err)
	}
	outStep("write " + name)
	return nil
}

// Publish puts staged files in place as one set; report.json must be the
// last. The journal lists the renames before any is made, so a kill in
// the middle is finished by the next start (rollForward); the old
// report.json goes first, so no reader ever sees it next to a new file.
// The journal is the commit of a --force run not committed before: once
// it is written the new set is complete (every file staged and synced),
// so rollForward removes the previous run (after the renames, before the
// journal goes) instead of a later start putting it back.
func Publish(dir string, set []Staged) error {
	b, _ := json.Marshal(set)
	if err := WriteAtomic(dir, JournalName, func(w io.Writer) error { _, err := w.Write(b); return err }); err != nil {
		Unstage(dir, set)
		return err
	}
	if err := SyncDir(dir); err != nil {
		return errkind.IO("jobs: publish: %w", err)
	}
	return rollForward(dir)
}

// ReadJournal reads the journal of a publication in dir: found says
// whether there is one; err is a journal that cannot be read or parsed.
func ReadJournal(dir string) (set []Staged, found bool, err error) {
	b, err := os.ReadFile(filepath.Join(dir, JournalName))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, false, nil
	}
	if err != nil {
		return nil, true, errkind.IO("jobs: %s: %w", JournalName, err)
	}
	if err := json.Unmarshal(b, &set); err != nil {
		return nil, true, errkind.IO("jobs: %s is damaged (%w): keep what you need of the folder and remove it, or choose another --out", JournalName, err)
	}
	return set, true, nil
}

// rollForward finishes the publication a journal describes, if any.
func rollForward(dir string) error {
	jpath := filepath.Join(dir, JournalName)
	set, found, err := ReadJournal(dir)
	if !found || err != nil {
		return err
	}
	for _, s := range set {
		if s.Name != "report.json" {
			continue
		}
		if _, err := os.Stat(filepath.Join(dir, s.Tmp)); err == nil {
			if err := os.Remove(filepath.Join(dir, s.Name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return errkind.IO("jobs: publish: %w", err)
			}
			if err := SyncDir(dir); err != nil {
				return errkind.IO("jobs: publish: %w", err)
			}
			outStep("remove old " + s.Name)
		}
	}
	for _, s := range set {
		if strings.ContainsRune(s.Tmp, filepath.Separator) || strings.ContainsRune(s.Name, filepath.Separator) {
			return errkind.IO("jobs: %s names a path outside the folder: %q", JournalName, s.Tmp)
		}
		err := os.Rename(filepath.Join(dir, s.Tmp), filepath.Join(dir, s.Name))
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return errkind.IO("jobs: publish %s: %w", s.Name, err)
		}
		if PublishHook != nil {
			PublishHook(s.Name)
		}
		outStep("publish " + s.Name)
	}
	if err := SyncDir(dir); err != nil {
		return errkind.IO("jobs: publish: %w", err)
	}
	// the new set is in place: a previous run set aside by --force goes
	// now, while the journal still says this set is the committed one
	if err := Discard(dir, PreviousDir); err != nil {
		return errkind.IO("jobs: --force: removing the previous run: %w", err)
	}
	if err := SyncDir(dir); err != nil {
		return errkind.IO("jobs: publish: %w", err)
	}
	if err := os.Remove(jpath); err != nil {
		return errkind.IO("jobs: publish: %w", err)
	}
	if err := SyncDir(dir); err != nil {
		return errkind.IO("jobs: publish: %w", err)
	}
	outStep("remove journal")
	return nil
}

// abandonPublication drops a publication the new run began and did not
// Finish (a rename failed): its staged files and its journal, so the next
// start does not roll it forward over the previous run just put back.
func abandonPublication(dir string) error {
	jpath := filepath.Join(dir, JournalName)
	set, found, err := ReadJournal(dir)
	if !found {
		return nil
	}
	var unreadable *fs.PathError
	if errors.As(err, &unreadable) {
		return err
	}
	for _, s := range set { // a journal that does not parse is dropped all the same
		if s.Tmp != "" && !strings.ContainsRune(s.Tmp, filepath.Separator) {
			os.Remove(filepath.Join(dir, s.Tmp))
		}
	}
	if err := os.Remove(jpath); err != nil {
		return errkind.IO("jobs: %s: %w", JournalName, err)
	}
	if err := SyncDir(dir); err != nil {
		return errkind.IO("jobs: %s: %w", JournalName, err)
	}
	return nil
}

// PublishHook is a test seam: called after each rename of a publication.
var PublishHook func(name string)

// StepHook is a test seam: called after each write, rename and removal
// of the output folder's safety steps (set aside, stage, publish,
// Discard), where a kill would leave the folder as it is.
var StepHook func(step string)

func outStep(step string) {
	if StepHook != nil {
		StepHook(step)
	}
}

// SyncDir syncs a folder, so the renames in it are durable; its error
// (an I/O error of the disk or the server) is the caller's. A filesystem
// that cannot sync a folder at all (EINVAL, ENOTSUP: some network and
// FUSE filesystems; EBADF: those that sync no descriptor opened to read,
// as a folder's is, which PostgreSQL's fsync of a folder also takes) is
// taken as it is, as before. EROFS is not: a folder's renames succeeded
// before it, so the filesystem went read-only since (ext4's answer once it
// aborted on an error), and they may be lost.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("sync the folder: %w", err)
	}
	err = syncDir(d)
	d.Close() // opened to read: its close loses nothing
	if err != nil && !errors.Is(err, syscall.EINVAL) && !errors.Is(err, syscall.ENOTSUP) && !errors.Is(err, syscall.EBADF) {
		return fmt.Errorf("sync the folder %s: %w", dir, err)
	}
	return nil
}

// syncDir is a folder's fsync, a seam the tests replace (a failing disk).
var syncDir = (*os.File).Sync

// Prepare (predict, predict --tile, eval-crops) locks the output folder, refusing one that holds a
// previous run (any command's) unless force. With force the previous
// run's entries are set aside, as eval's --force does, and come back if
// the new run fails before it publishes; once it has published they are
// removed (commit), so an eval folder does not keep a results.csv or a
// report.html that no longer matches its predictions.
func Prepare(dir string, force bool, names Names) (*Run, error) {
	o, err := Open(dir, names)
	if err != nil {
		return nil, err
	}
	present := names.Present(dir)
	switch {
	case len(present) == 0:
	case !force:
		err = errkind.Usage("jobs: --out %s holds a previous run (%s); use --force to replace it", dir, present[0])
	default:
		o.aside = true // finish puts back a move that failed part way
		err = SetAside(dir, present)
	}
	if err != nil {
		o.Finish(err)
		return nil, err
	}
	return o, nil
}
