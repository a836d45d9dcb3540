package cmpi

import "testing"

func TestShortVersion(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"Open MPI v4.1.4, package: Debian OpenMPI, ident: 4.1.4, repo rev: v4.1.4, May 26, 2022\x00", "Open MPI v4.1.4"},
		{"MPICH Version:\t4.0.2\nMPICH Release date:\tThu Apr  7 12:34:45 CDT 2022\n", "MPICH 4.0.2"},
		{"MPICH Version:      3.3a2\nMPICH Release date: Sun Nov 13 09:12:11 MST 2016", "MPICH 3.3a2"},
		{"Intel(R) MPI Library 2021.5 for Linux* OS\n", "Intel(R) MPI Library 2021.5 for Linux* OS"},
		{"", "unknown MPI"},
	} {
		if got := shortVersion(tc.in); got != tc.want {
			t.Errorf("shortVersion(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
