package run

import (
	"bytes"
	"context"
	"database/sql"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/racefree/racefree/internal/testing/cputime"
)

// The CPU time of a cell's calls is read from the kernel: this process's
// with getrusage (the clients, racefree, and SQLite, which runs inside
// it), the servers' from /proc/PID/stat of the server processes that serve
// the benchmark: Redis's process, and PostgreSQL's backends of the
// benchmark's own connections (application_name racefree-bench) with its
// WAL writer, checkpointer and background writer. Each process counts
// only if it lived through the whole slice, so that a backend of another
// client that came and went is left out rather than counted negative.

// benchAppName is the application_name of the benchmark's PostgreSQL
// connections, by which its backends are found.
const benchAppName = "racefree-bench"

// cpuTime is the CPU time (user and system) used so far by this process
// and by each server process.
type cpuTime struct {
	self    time.Duration
	servers map[int]time.Duration
}

// cpuSpent is the CPU time spent between two readings.
type cpuSpent struct{ self, servers time.Duration }

func (a cpuSpent) add(b cpuSpent) cpuSpent { return cpuSpent{a.self + b.self, a.servers + b.servers} }

// since returns what was spent from before to now.
func (now cpuTime) since(before cpuTime) cpuSpent {
	s := cpuSpent{self: now.self - before.self}
	for pid, t := range now.servers {
		if t0, ok := before.servers[pid]; ok && t >= t0 {
			s.servers += t - t0
		}
	}
	return s
}

var (
	pgMu    sync.Mutex
	pgAdmin *sql.DB // set by Engines when PostgreSQL runs: lists its backends
)

// cpuNow reads the CPU time used so far.
func cpuNow() cpuTime {
	c := cpuTime{self: cputime.Process(), servers: map[int]time.Duration{}}
	want := map[int]bool{}
	pgMu.Lock()
	admin := pgAdmin
	pgMu.Unlock()
	if admin != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		rows, err := admin.QueryContext(ctx, `SELECT pid FROM pg_stat_activity
			WHERE application_name = $1 OR backend_type IN ('walwriter', 'checkpointer', 'background writer')`, benchAppName)
		if err == nil {
			for rows.Next() {
				var pid int
				if rows.Scan(&pid) == nil {
					want[pid] = true
				}
			}
			rows.Close()
		}
		cancel()
	}
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, p := range stats {
		data, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		// pid (comm) state ppid …: comm may hold spaces, so the fields
		// are split after its closing parenthesis; utime and stime are
		// the 14th and 15th fields.
		open, close := bytes.IndexByte(data, '('), bytes.LastIndexByte(data, ')')
		if open < 1 || close < open {
			continue
		}
		pid, err := strconv.Atoi(string(bytes.TrimSpace(data[:open])))
		if err != nil || !(want[pid] || string(data[open+1:close]) == "redis-server") {
			continue
		}
		f := bytes.Fields(data[close+1:])
		if len(f) < 13 {
			continue
		}
		u, _ := strconv.ParseInt(string(f[11]), 10, 64)
		s, _ := strconv.ParseInt(string(f[12]), 10, 64)
		c.servers[pid] = time.Duration(u+s) * clockTick
	}
	return c
}

// clockTick is the unit of /proc/PID/stat's times: USER_HZ, 100 on every
// Linux this runs on.
const clockTick = 10 * time.Millisecond
