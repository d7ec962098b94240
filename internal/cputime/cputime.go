// Package cputime reads a process's CPU time from procfs, for the
// benchmarks that compare pepd's CPU per request or per query with its
// peers' (Squid, dnsmasq, HAProxy) in the same run.
package cputime

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// userHZ is the unit of /proc/<pid>/stat's time fields (USER_HZ, 100 on
// Linux).
const userHZ = 100

// Of returns the user+system CPU time process pid has used so far, from
// /proc/<pid>/stat fields 14 (utime) and 15 (stime), proc(5), in steps of
// 10 ms. Errors: the process is gone or the file is not in that format.
func Of(pid int) (time.Duration, error) {
	u, sys, err := Split(pid)
	return u + sys, err
}

// Split returns the user and the system CPU time process pid has used so
// far (Of's two fields, apart): where a difference in CPU per request
// goes, user space (parsing, TLS, the Go runtime) or the kernel (system
// calls, the TCP stack). Errors as Of's.
func Split(pid int) (user, system time.Duration, err error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, 0, fmt.Errorf("cputime: %w", err)
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')') // the command name may hold spaces and parentheses
	if i < 0 || i+2 > len(s) {
		return 0, 0, fmt.Errorf("cputime: /proc/%d/stat: no command name", pid)
	}
	f := strings.Fields(s[i+2:]) // fields from 3 (state) on
	if len(f) < 13 {
		return 0, 0, fmt.Errorf("cputime: /proc/%d/stat: %d fields, want at least 15", pid, len(f)+2)
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, 0, fmt.Errorf("cputime: /proc/%d/stat: utime %q, stime %q are not numbers", pid, f[11], f[12])
	}
	return time.Duration(ut) * time.Second / userHZ, time.Duration(st) * time.Second / userHZ, nil
}
