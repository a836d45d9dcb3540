package jobs

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

	"github.com/canopy-hpc/canopy/internal/parts"
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
	lockName      = ".canopy.lock"
	previousDir   = ".canopy-previous"
	movedList     = "moved.json"
	journalName   = ".canopy-publish.json"
	discardPrefix = ".canopy-discard-"
	faultPrefix   = ".canopy-fault"
)

// lockHolder is what the lock file says about the run holding it.
type lockHolder struct {
	Job     string `json:"job"`
	Host    string `json:"host"`
	PID     int    `json:"pid"`
	Started string `json:"started"`
}

func (h lockHolder) String() string {
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

// outLock is rank 0's exclusive hold on an output folder.
type outLock struct {
	f     *os.File
	flock bool // false where the filesystem has no flock (the content decides)
}

// lockOut creates dir if needed and takes its lock. flock(2) is the lock:
// the kernel (or the NFS server) drops it when the holder dies, so a lock
// left by a killed run is stale by construction and is taken over. Where
// the filesystem has no flock, a non-empty lock file is held unless it
// names a process of this host that no longer runs.
func lockOut(dir string) (*outLock, error) {
	// --out naming a file (or a path through one) is a usage error, not
	// an I/O failure of canopy's own files
	if st, err := os.Stat(dir); err == nil && !st.IsDir() {
		kind := "a file"
		if !st.Mode().IsRegular() {
			kind = "a " + st.Mode().Type().String() + " entry"
		}
		return nil, usageErr("jobs: --out %s is %s, not a folder; choose a folder", dir, kind)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		if errors.Is(err, syscall.ENOTDIR) {
			return nil, usageErr("jobs: --out %s: a part of the path is a file, not a folder: %w", dir, err)
		}
		return nil, ioErr("jobs: output folder: %w", err)
	}
	path := filepath.Join(dir, lockName)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, ioErr("jobs: output folder lock: %w", err)
	}
	held := readHolder(f)
	l := &outLock{f: f, flock: true}
	host, _ := os.Hostname()
	switch err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); {
	case err == nil:
	case errors.Is(err, syscall.EWOULDBLOCK):
		f.Close()
		return nil, usageErr("jobs: --out %s is in use by another canopy run (%s); wait for it to end or choose another --out", dir, held)
	case errors.Is(err, syscall.ENOLCK), errors.Is(err, syscall.EOPNOTSUPP), errors.Is(err, syscall.ENOSYS), errors.Is(err, syscall.EINVAL):
		l.flock = false
		if held.PID != 0 && !(held.Host == host && !pidAlive(held.PID)) {
			f.Close()
			return nil, usageErr("jobs: --out %s is in use by another canopy run (%s); this filesystem has no flock, so if that run has ended remove %s", dir, held, path)
		}
	default:
		f.Close()
		return nil, ioErr("jobs: output folder lock: %w", err)
	}
	me := lockHolder{Job: jobID(), Host: host, PID: os.Getpid(), Started: time.Now().UTC().Format(time.RFC3339)}
	b, _ := json.Marshal(me)
	if err := f.Truncate(0); err == nil {
		_, err = f.WriteAt(append(b, '\n'), 0)
	}
	if err == nil {
		err = f.Sync()
	}
	if err != nil {
		l.release()
		return nil, ioErr("jobs: output folder lock: %w", err)
	}
	return l, nil
}

func readHolder(f *os.File) lockHolder {
	var h lockHolder
	b, _ := io.ReadAll(io.LimitReader(f, 4096))
	json.Unmarshal(b, &h)
	return h
}

func pidAlive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// release empties the lock file (the no-flock rule's "free") and unlocks.
func (l *outLock) release() {
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

// reportFiles are the files a run writes; any of them in --out marks a
// previous run.
var reportFiles = []string{"report.json", "predictions.csv", "results.csv", "report.html", cropsFile, cocoTruthFile, cocoPredFile, gpkgFile}

const manifestFile = "manifest.json"

// runFiles are the entries of OUT that mark a previous run.
var runFiles = append(append([]string(nil), reportFiles...), manifestFile, parts.Dir, rastersDir)

// presentRunFiles are the entries of runFiles in dir.
func presentRunFiles(dir string) []string {
	var present []string
	for _, f := range runFiles {
		if _, err := os.Lstat(filepath.Join(dir, f)); err == nil {
			present = append(present, f)
		}
	}
	return present
}

// outRun is rank 0's hold on the output folder for one run.
type outRun struct {
	dir       string
	lock      *outLock
	aside     bool // a previous run is set aside (--force)
	committed bool
	probe     string
}

// openOut locks dir and tidies what an earlier run left half done.
func openOut(dir string) (*outRun, error) {
	if dir == "" {
		return nil, usageErr("jobs: --out is empty")
	}
	l, err := lockOut(dir)
	if err != nil {
		return nil, err
	}
	o := &outRun{dir: dir, lock: l}
	if err := tidyOut(dir); err != nil {
		l.release()
		return nil, err
	}
	return o, nil
}

// commit ends the previous run's reprieve: the new run has passed every
// check and saved work of its own.
func (o *outRun) commit() error {
	if o == nil || !o.aside || o.committed {
		return nil
	}
	o.committed = true
	if err := discard(o.dir, previousDir); err != nil {
		return fmt.Errorf("jobs: --force: removing the previous run: %w", err)
	}
	return nil
}

// finish ends the run: a run that failed before it committed puts the
// previous run back; the probe file goes; the lock is released.
func (o *outRun) finish(err error) (restored bool) {
	if o == nil {
		return false
	}
	if err != nil && o.aside && !o.committed {
		restored = restorePrevious(o.dir) == nil
	}
	defer o.lock.release()
	if o.probe != "" {
		os.Remove(filepath.Join(o.dir, probeName(o.probe)))
	}
	return restored
}

func nonce() string {
	var b [8]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// discard renames OUT/name to a discard folder (one atomic step) and
// removes it.
func discard(dir, name string) error {
	trash := filepath.Join(dir, discardPrefix+nonce())
	if err := os.Rename(filepath.Join(dir, name), trash); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return err
	}
	outStep("discard " + name)
	return os.RemoveAll(trash)
}

// setAside moves the previous run's entries into OUT/.canopy-previous. The
// list of entries is written first, so restorePrevious can finish a move
// or a restore that a kill cut short.
func setAside(dir string, names []string) error {
	prev := filepath.Join(dir, previousDir)
	if err := os.MkdirAll(prev, 0o755); err != nil {
		return ioErr("jobs: --force: %w", err)
	}
	b, _ := json.Marshal(names)
	if err := writeAtomic(prev, movedList, func(w io.Writer) error { _, err := w.Write(b); return err }); err != nil {
		return ioErr("jobs: --force: %w", err)
	}
	for _, n := range names {
		if err := os.Rename(filepath.Join(dir, n), filepath.Join(prev, n)); err != nil {
			return ioErr("jobs: --force: setting the previous run aside: %w", err)
		}
		outStep("set aside " + n)
	}
	syncDir(dir)
	return nil
}

// restorePrevious puts a set-aside run back: entries of the new run go,
// the listed entries return. Running it again after a kill finishes it.
func restorePrevious(dir string) error {
	prev := filepath.Join(dir, previousDir)
	b, err := os.ReadFile(filepath.Join(prev, movedList))
	if errors.Is(err, fs.ErrNotExist) {
		// nothing was moved yet (the list comes first), or no run is aside
		return os.RemoveAll(prev)
	}
	if err != nil {
		return ioErr("jobs: restoring the previous run: %w", err)
	}
	var moved []string
	if err := json.Unmarshal(b, &moved); err != nil {
		return ioErr("jobs: restoring the previous run: %s/%s is damaged (%w): keep what you need of it and remove %s, or choose another --out", previousDir, movedList, err, previousDir)
	}
	if err := abandonPublication(dir); err != nil {
		return err
	}
	was := map[string]bool{}
	for _, n := range moved {
		was[n] = true
	}
	for _, n := range runFiles {
		cur, old := filepath.Join(dir, n), filepath.Join(prev, n)
		_, oerr := os.Lstat(old)
		if was[n] && oerr != nil {
			continue // put back already
		}
		if _, err := os.Lstat(cur); err == nil {
			if err := discard(dir, n); err != nil {
				return ioErr("jobs: restoring the previous run: %w", err)
			}
		}
		if was[n] {
			if err := os.Rename(old, cur); err != nil {
				return ioErr("jobs: restoring the previous run: %w", err)
			}
		}
	}
	syncDir(dir)
	return os.RemoveAll(prev)
}

// tidyOut runs under the lock, before anything else touches the folder:
// it finishes an interrupted publication, puts back a run that an earlier
// --force set aside and never replaced, and removes temporary files,
// probe files, fault markers and discard folders.
func tidyOut(dir string) error {
	if err := rollForward(dir); err != nil {
		return err
	}
	if err := restorePrevious(dir); err != nil {
		return err
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return ioErr("jobs: output folder: %w", err)
	}
	for _, e := range ents {
		if isLeftover(e.Name()) {
			if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
				return ioErr("jobs: removing a leftover: %w", err)
			}
		}
	}
	return nil
}

func isLeftover(name string) bool {
	for _, f := range append([]string{manifestFile, journalName}, reportFiles...) {
		if strings.HasPrefix(name, "."+f+".tmp") || strings.HasPrefix(name, f+".tmp") {
			return true
		}
	}
	for _, p := range []string{".canopy-probe-", discardPrefix, faultPrefix} {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

// staged is a file written and synced under a temporary name in the
// output folder, waiting to be published.
type staged struct {
	Tmp    string `json:"tmp"`
	Name   string `json:"name"`
	SHA256 string `json:"-"`
}

// stage writes name's content under a temporary name in dir, synced, and
// returns it with the sha256 of its bytes.
func stage(dir, name string, fill func(io.Writer) error) (staged, error) {
	f, err := os.CreateTemp(dir, "."+name+".tmp*")
	if err != nil {
		return staged{}, fmt.Errorf("jobs: %w", err)
	}
	tmp := f.Name()
	fail := func(err error) (staged, error) {
		f.Close()
		os.Remove(tmp)
		return staged{}, fmt.Errorf("jobs: write %s: %w", name, err)
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
		return staged{}, fmt.Errorf("jobs: close %s: %w", name, err)
	}
	outStep("stage " + name)
	return staged{Tmp: filepath.Base(tmp), Name: name, SHA256: digestHex(h)}, nil
}

// writeAtomic writes one file: staged, then renamed into place.
func writeAtomic(dir, name string, fill func(io.Writer) error) error {
	s, err := stage(dir, name, fill)
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

// publish puts staged files in place as one set; report.json must be the
// last. The journal lists the renames before any is made, so a kill in
// the middle is finished by the next start (rollForward); the old
// report.json goes first, so no reader ever sees it next to a new file.
// The journal is the commit of a --force run not committed before: once
// it is written the new set is complete (every file staged and synced),
// so rollForward removes the previous run (after the renames, before the
// journal goes) instead of a later start putting it back.
func publish(dir string, set []staged) error {
	b, _ := json.Marshal(set)
	if err := writeAtomic(dir, journalName, func(w io.Writer) error { _, err := w.Write(b); return err }); err != nil {
		for _, s := range set {
			os.Remove(filepath.Join(dir, s.Tmp))
		}
		return err
	}
	syncDir(dir)
	return rollForward(dir)
}

// readJournal reads the journal of a publication in dir: found says
// whether there is one; err is a journal that cannot be read or parsed.
func readJournal(dir string) (set []staged, found bool, err error) {
	b, err := os.ReadFile(filepath.Join(dir, journalName))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, false, nil
	}
	if err != nil {
		return nil, true, ioErr("jobs: %s: %w", journalName, err)
	}
	if err := json.Unmarshal(b, &set); err != nil {
		return nil, true, ioErr("jobs: %s is damaged (%w): keep what you need of the folder and remove it, or choose another --out", journalName, err)
	}
	return set, true, nil
}

// rollForward finishes the publication a journal describes, if any.
func rollForward(dir string) error {
	jpath := filepath.Join(dir, journalName)
	set, found, err := readJournal(dir)
	if !found || err != nil {
		return err
	}
	for _, s := range set {
		if s.Name != "report.json" {
			continue
		}
		if _, err := os.Stat(filepath.Join(dir, s.Tmp)); err == nil {
			if err := os.Remove(filepath.Join(dir, s.Name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return ioErr("jobs: publish: %w", err)
			}
			syncDir(dir)
			outStep("remove old " + s.Name)
		}
	}
	for _, s := range set {
		if strings.ContainsRune(s.Tmp, filepath.Separator) || strings.ContainsRune(s.Name, filepath.Separator) {
			return ioErr("jobs: %s names a path outside the folder: %q", journalName, s.Tmp)
		}
		err := os.Rename(filepath.Join(dir, s.Tmp), filepath.Join(dir, s.Name))
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return ioErr("jobs: publish %s: %w", s.Name, err)
		}
		if publishHook != nil {
			publishHook(s.Name)
		}
		outStep("publish " + s.Name)
	}
	syncDir(dir)
	// the new set is in place: a previous run set aside by --force goes
	// now, while the journal still says this set is the committed one
	if err := discard(dir, previousDir); err != nil {
		return ioErr("jobs: --force: removing the previous run: %w", err)
	}
	syncDir(dir)
	if err := os.Remove(jpath); err != nil {
		return ioErr("jobs: publish: %w", err)
	}
	syncDir(dir)
	outStep("remove journal")
	return nil
}

// abandonPublication drops a publication the new run began and did not
// finish (a rename failed): its staged files and its journal, so the next
// start does not roll it forward over the previous run just put back.
func abandonPublication(dir string) error {
	jpath := filepath.Join(dir, journalName)
	set, found, err := readJournal(dir)
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
		return ioErr("jobs: %s: %w", journalName, err)
	}
	syncDir(dir)
	return nil
}

// publishHook is a test seam: called after each rename of a publication.
var publishHook func(name string)

// outStepHook is a test seam: called after each write, rename and removal
// of the output folder's safety steps (set aside, stage, publish,
// discard), where a kill would leave the folder as it is.
var outStepHook func(step string)

func outStep(step string) {
	if outStepHook != nil {
		outStepHook(step)
	}
}

func syncDir(dir string) {
	if d, err := os.Open(dir); err == nil {
		d.Sync()
		d.Close()
	}
}

// prepareRunOut (predict, predict --tile, eval-crops) locks the output folder, refusing one that holds a
// previous run (any command's) unless force. With force the previous
// run's entries are set aside, as eval's --force does, and come back if
// the new run fails before it publishes; once it has published they are
// removed (commit), so an eval folder does not keep a results.csv or a
// report.html that no longer matches its predictions.
func prepareRunOut(dir string, force bool) (*outRun, error) {
	o, err := openOut(dir)
	if err != nil {
		return nil, err
	}
	present := presentRunFiles(dir)
	switch {
	case len(present) == 0:
	case !force:
		err = usageErr("jobs: --out %s holds a previous run (%s); use --force to replace it", dir, present[0])
	default:
		o.aside = true // finish puts back a move that failed part way
		err = setAside(dir, present)
	}
	if err != nil {
		o.finish(err)
		return nil, err
	}
	return o, nil
}
