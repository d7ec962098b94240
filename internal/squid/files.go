package squid

import (
	"bytes"
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
)

// Template is the squid.conf template's path relative to the repository
// root: the text Render executes.
const Template = "configs/squid.conf"

// ReadTemplate finds Template from the working folder up, then from the
// running executable's folder up (bin/testbed in a checkout; a test binary
// runs in its package's folder), and returns its text and path. Errors: no
// folder on either way up holds it, or it cannot be read.
func ReadTemplate() (tmpl, path string, err error) {
	path, err = findTemplate()
	if err != nil {
		return "", "", err
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", "", fmt.Errorf("squid: %w", err)
	}
	return string(b), path, nil
}

// findTemplate returns the path of Template (ReadTemplate).
func findTemplate() (string, error) {
	wd, _ := os.Getwd()
	starts := []string{wd}
	if exe, err := os.Executable(); err == nil {
		starts = append(starts, filepath.Dir(exe))
	}
	for _, dir := range starts {
		for dir != "" {
			p := filepath.Join(dir, Template)
			if _, err := os.Stat(p); err == nil {
				return p, nil
			}
			parent := filepath.Dir(dir)
			if parent == dir {
				break
			}
			dir = parent
		}
	}
	return "", fmt.Errorf("squid: %s not found from %q or the executable's folder up", Template, wd)
}

// Service returns a Squid service name (squid -n) for name: "pep" and
// name's ASCII letters and digits, the rest left out. Squid names its
// shared memory segments after the service (/dev/shm/<service>-cf__*.shm,
// collapsed forwarding), and /dev/shm is shared by every network
// namespace and every test: two Squids with one name (Squid's default is
// "squid") collide ("shm_open ... File exists"), so each Squid that runs
// beside others needs a name of its own (a testbed's prefix, a test's
// process id and sequence number).
func Service(name string) string {
	b := []byte("pep")
	for _, c := range []byte(name) {
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' {
			b = append(b, c)
		}
	}
	return string(b)
}

// WriteConf renders tmpl (the text of Template) with c, appends extra
// (more squid.conf lines, e.g. a test's or the testbed's own http_port;
// "" for none) and writes the result to path, mode 0644. Errors: Render's,
// or the file's.
func WriteConf(path, tmpl string, c Conf, extra string) error {
	var b bytes.Buffer
	if err := Render(&b, tmpl, c); err != nil {
		return err
	}
	b.WriteString(extra)
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		return fmt.Errorf("squid: %w", err)
	}
	return nil
}

// MakeDirs creates c.CacheDir and c.LogDir (mode 0755, parents included),
// c.CacheDir emptied first when fresh (a cold cache: nothing survives
// from an earlier run; `squid -z` then builds it anew). When this process
// is root, Squid switches to c.User (cache_effective_user) after start, so
// both folders and everything in them are given to c.User; the folders
// above them must let c.User through (mode 0755), which MakeDirs does not
// change. Errors: c.User unknown (as root), or a file system error.
func MakeDirs(c Conf, fresh bool) error {
	if fresh {
		if err := os.RemoveAll(c.CacheDir); err != nil {
			return fmt.Errorf("squid: %w", err)
		}
	}
	for _, d := range []string{c.CacheDir, c.LogDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fmt.Errorf("squid: %w", err)
		}
	}
	if os.Geteuid() != 0 {
		return nil
	}
	u, err := user.Lookup(c.User)
	if err != nil {
		return fmt.Errorf("squid: cache_effective_user: %w", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	for _, d := range []string{c.CacheDir, c.LogDir} {
		if err := filepath.Walk(d, func(p string, _ os.FileInfo, err error) error {
			if err != nil {
				return err
			}
			return os.Lchown(p, uid, gid)
		}); err != nil {
			return fmt.Errorf("squid: %w", err)
		}
	}
	return nil
}

// InitArgs are the arguments of `squid` that build the cache folders of
// the configuration file conf (its cache_dir, in c.CacheDir, which must
// exist: MakeDirs) and exit: squid -n service -z -N -f conf. Run it once
// before RunArgs on an empty cache; service is Service's.
func InitArgs(service, conf string) []string {
	return []string{"-n", service, "-z", "-N", "-f", conf}
}

// RunArgs are the arguments of `squid` that run Squid with the
// configuration file conf in the foreground (-N: no daemon, so that the
// caller supervises it and SIGTERM or SIGINT stop it after
// shutdown_lifetime): squid -n service -N -f conf. Squid has no readiness
// signal: it is ready when its http_port (Conf.Listen) accepts.
func RunArgs(service, conf string) []string {
	return []string{"-n", service, "-N", "-f", conf}
}
