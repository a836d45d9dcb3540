package jobs

import (
	"archive/zip"
	"bytes"
	"encoding/binary"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// hostileText retitles the terminal, clears it and starts a forged line.
const hostileText = "\x1b]0;pwned\x07\x1b[2J\ncanopy: all fine"

// torchZip writes a torch.save archive holding pkl as its data.pkl.
func torchZip(t *testing.T, dir, name string, pkl []byte) string {
	t.Helper()
	var buf bytes.Buffer
	w := zip.NewWriter(&buf)
	for _, e := range []struct{ n, b string }{{"a/data.pkl", string(pkl)}, {"a/version", "3\n"}, {"a/byteorder", "little"}} {
		fw, err := w.CreateHeader(&zip.FileHeader{Name: e.n, Method: zip.Store})
		if err != nil {
			t.Fatal(err)
		}
		fw.Write([]byte(e.b))
	}
	w.Close()
	p := filepath.Join(dir, name)
	os.WriteFile(p, buf.Bytes(), 0o644)
	return p
}

// pickleStr is a BINUNICODE opcode pushing s.
func pickleStr(s string) []byte {
	b := []byte{'X', 0, 0, 0, 0}
	binary.LittleEndian.PutUint32(b[1:], uint32(len(s)))
	return append(b, s...)
}

func pickleOf(parts ...[]byte) []byte {
	return append(append([]byte{0x80, 2}, bytes.Join(parts, nil)...), '.')
}

// Every message that quotes text from a file canopy reads reaches the
// terminal escaped, from each source: a pickle's GLOBAL name, a .pt's dict
// key and a .ckpt's state-dict key, a label dictionary's names, a truth
// image_path, a raster list's name, a config.yaml value. stderr holds no
// ESC or BEL, every line is canopy's own ("canopy: …", none forged by a
// newline in the text), and the text is there, escaped.
func TestStderrEscapesFileText(t *testing.T) {
	dir := t.TempDir()
	h := hostileText
	global := torchZip(t, dir, "global.pt", pickleOf(pickleStr("os"+h), pickleStr("system"+h), []byte{0x93}))
	dictKey := torchZip(t, dir, "key.pt", pickleOf([]byte{'}'}, pickleStr("w"+h), []byte{'J', 1, 0, 0, 0, 's'}))
	sdKey := torchZip(t, dir, "sd.ckpt", pickleOf([]byte{'}'}, pickleStr("state_dict"), []byte{'}'}, pickleStr("model.w"+h), []byte{'J', 1, 0, 0, 0, 's', 's'}))
	imgs := t.TempDir()
	truth := filepath.Join(imgs, "truth.csv")
	os.WriteFile(truth, []byte("image_path,xmin,ymin,xmax,ymax,label\n\"a"+h+".png\",1,1,5,5,Tree\n"), 0o644)
	list := filepath.Join(imgs, "list.csv")
	os.WriteFile(list, []byte("image_path\n\"r"+h+".tif\"\n"), 0o644)
	dict := filepath.Join(imgs, "labels.csv")
	os.WriteFile(dict, []byte("label,id\n\"Tree"+h+"\",0\n"), 0o644)
	cfgFile := filepath.Join(imgs, "config.yaml")
	// YAML admits no C0 control: a bidi override is what a config can hold
	os.WriteFile(cfgFile, []byte("score_thresh: \"0.3\u202e\"\n"), 0o644)
	model := []string{"--model", demoModelDir, "--threads", "1"}
	for name, args := range map[string][]string{
		"pickle GLOBAL":  {"predict", "--csv", list, "--model", global},
		"dict key":       {"predict", "--csv", list, "--model", dictKey},
		"state-dict key": {"predict", "--csv", list, "--model", sdKey},
		"label_dict":     append([]string{"predict", "--csv", list, "--label-dict", dict}, model...),
		"truth":          append([]string{"eval", "--csv", truth}, model...),
		"raster list":    append([]string{"predict", "--tile", "--csv", list}, model...),
		"config.yaml":    append([]string{"predict", "--csv", list, "--config", cfgFile}, model...),
	} {
		code, stderr := runArgs(t, append(args, "--out", filepath.Join(t.TempDir(), "out"))...)
		lines := strings.Split(strings.TrimSuffix(stderr, "\n"), "\n")
		forged := false
		for _, l := range lines {
			forged = forged || !strings.HasPrefix(l, "canopy: ") && l != "run 'canopy --help' for usage"
		}
		// as the tables write it, or Go's %q (\a, \n) where a message quotes
		escaped := strings.Contains(stderr, `\x1b[2J\x0acanopy: all fine`) || strings.Contains(stderr, `\x1b[2J\ncanopy: all fine`)
		if name == "config.yaml" {
			escaped = strings.Contains(stderr, `0.3\u202e`)
		}
		if code == 0 || strings.ContainsAny(stderr, "\x1b\x07\u202e") || forged || !escaped {
			t.Errorf("%s: exit %d, stderr %q", name, code, stderr)
			continue
		}
		t.Logf("%s: exit %d: %s", name, code, stderr)
	}
}
