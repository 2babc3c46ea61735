package main

// What the WAL of the saturating push is made of: pg_waldump reads the
// records between two positions of the cluster's WAL, and each record's
// bytes go to the table or index it changes and its kind.

import (
	"bufio"
	"cmp"
	"context"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fulfillplatform/fulfillment/rig/pgcluster"
)

// walSlot keeps the push's WAL on disk until pg_waldump has read it: a
// checkpoint during the push would otherwise recycle its first segments.
const walSlot = "bench_wal_breakdown"

// WALShare is what one kind of record on one relation added to the WAL,
// per event.
type WALShare struct {
	// Relation is the table or index the record changes (its first block
	// reference), or "" for records of none (a commit, a checkpoint).
	Relation string `json:"relation,omitempty"`
	// Record is the resource manager and the record's kind: "Heap INSERT".
	Record  string  `json:"record"`
	Records float64 `json:"records_per_event"`
	Bytes   float64 `json:"bytes_per_event"`
	// ImageBytes are the full-page images among Bytes (a page's first
	// change after a checkpoint).
	ImageBytes float64 `json:"image_bytes_per_event,omitempty"`
}

// reserveWAL makes the cluster keep its WAL from now on, until releaseWAL.
func reserveWAL(ctx context.Context, db *pgxpool.Pool) error {
	_, err := db.Exec(ctx, "SELECT pg_create_physical_replication_slot($1, true)", walSlot)
	return err
}

// releaseWAL lets the cluster recycle the WAL reserveWAL kept.
func releaseWAL(ctx context.Context, db *pgxpool.Pool) error {
	_, err := db.Exec(ctx, "SELECT pg_drop_replication_slot($1)", walSlot)
	return err
}

// walLine is the part of a pg_waldump line the breakdown reads:
//
//	rmgr: Heap        len (rec/tot):     59/  8251, tx: 735, lsn: 0/01A3C0F8, prev 0/01A3C0C0, desc: INSERT off 7 flags 0x00, blkref #0: rel 1663/5/16384 blk 0 FPW
var (
	walLine = regexp.MustCompile(`^rmgr: (\S+)\s+len \(rec/tot\):\s*(\d+)/\s*(\d+),.*?desc: ([A-Z0-9_+]+)`)
	walRel  = regexp.MustCompile(`blkref #0: rel \d+/(\d+)/(\d+)`)
)

// walBreakdown reads the WAL from..to (insert positions, in bytes) of the
// cluster whose data directory is dataDir, and sums it per relation and
// kind of record, ÷ events; relations of db's database are named, those
// of other databases are "database OID". The shares come largest first;
// the last is what no record accounts for (page headers, alignment).
func walBreakdown(ctx context.Context, db *pgxpool.Pool, dataDir string, from, to int64, events int) ([]WALShare, error) {
	bin, err := pgcluster.FindBinaries()
	if err != nil {
		return nil, err
	}
	var dbOID uint32
	if err := db.QueryRow(ctx, "SELECT oid FROM pg_database WHERE datname = current_database()").Scan(&dbOID); err != nil {
		return nil, err
	}
	names := map[uint32]string{}
	rows, err := db.Query(ctx, `SELECT pg_relation_filenode(oid), relname FROM pg_class WHERE pg_relation_filenode(oid) IS NOT NULL`)
	if err != nil {
		return nil, err
	}
	var (
		node uint32
		name string
	)
	if _, err := pgx.ForEachRow(rows, []any{&node, &name}, func() error { names[node] = name; return nil }); err != nil {
		return nil, err
	}
	// The last record's end must be on disk: a switch record is flushed
	// as it is written.
	if _, err := db.Exec(ctx, "SELECT pg_switch_wal()"); err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, filepath.Join(bin, "pg_waldump"), "--path", filepath.Join(dataDir, "pg_wal"),
		"--start", lsn(from), "--end", lsn(to))
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	w := newWALSums(dbOID, names)
	if err := w.read(out); err != nil {
		_ = cmd.Process.Kill() // it may be blocked writing what is no longer read
		_ = cmd.Wait()
		return nil, err
	}
	if err := cmd.Wait(); err != nil {
		return nil, fmt.Errorf("pg_waldump: %w: %s", err, strings.TrimSpace(stderr.String()))
	}
	return w.perEvent(to-from, events), nil
}

// walSums adds up pg_waldump's records by relation and kind.
type walSums struct {
	dbOID   uint32
	names   map[uint32]string // relation names by file node, in database dbOID
	sums    map[walKey]*WALShare
	counted int64 // the records' bytes
}

type walKey struct{ rel, rec string }

func newWALSums(dbOID uint32, names map[uint32]string) *walSums {
	return &walSums{dbOID: dbOID, names: names, sums: map[walKey]*WALShare{}}
}

// read adds the records of pg_waldump's output r; other lines are skipped.
func (w *walSums) read(r io.Reader) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		m := walLine.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		rec, _ := strconv.ParseInt(m[2], 10, 64)
		tot, _ := strconv.ParseInt(m[3], 10, 64)
		k := walKey{rec: m[1] + " " + m[4]}
		if r := walRel.FindStringSubmatch(sc.Text()); r != nil {
			d, _ := strconv.ParseUint(r[1], 10, 32)
			n, _ := strconv.ParseUint(r[2], 10, 32)
			switch name, ok := w.names[uint32(n)]; {
			case d != uint64(w.dbOID) && d != 0: // 0: a catalog shared by every database
				k.rel = "database " + r[1]
			case ok:
				k.rel = name
			default:
				k.rel = "relation " + r[2]
			}
		}
		s := w.sums[k]
		if s == nil {
			s = &WALShare{Relation: k.rel, Record: k.rec}
			w.sums[k] = s
		}
		s.Records++
		s.Bytes += float64(tot)
		s.ImageBytes += float64(tot - rec)
		w.counted += tot
	}
	return sc.Err()
}

// perEvent is the sums ÷ events, largest first, then the rest of total
// (the WAL's bytes), which no record accounts for.
func (w *walSums) perEvent(total int64, events int) []WALShare {
	shares := make([]WALShare, 0, len(w.sums)+1)
	for _, s := range w.sums {
		shares = append(shares, *s)
	}
	slices.SortFunc(shares, func(a, b WALShare) int { return cmp.Compare(b.Bytes, a.Bytes) })
	shares = append(shares, WALShare{Record: "page headers and alignment", Bytes: float64(total - w.counted)})
	for i := range shares {
		shares[i].Records = round2(shares[i].Records / float64(events))
		shares[i].Bytes = round1(shares[i].Bytes / float64(events))
		shares[i].ImageBytes = round1(shares[i].ImageBytes / float64(events))
	}
	return shares
}

// lsn writes a WAL position as PostgreSQL does: 0/1A3C0F8.
func lsn(pos int64) string { return fmt.Sprintf("%X/%X", uint64(pos)>>32, uint32(pos)) }
