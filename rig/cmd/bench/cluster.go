package main

// The durable PostgreSQL cluster of a run (its databases, its settings) and
// the sampling of what its backends wait on.

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fulfillplatform/fulfillment/rig/loadgen"
	"github.com/fulfillplatform/fulfillment/rig/pgcluster"
	"github.com/fulfillplatform/fulfillment/storage"
)

// startCluster starts the durable cluster and creates the two databases.
func (b *bench) startCluster(ctx context.Context) error {
	var preload []string
	if b.o.statements {
		preload = append(preload, "shared_preload_libraries=pg_stat_statements", "pg_stat_statements.max=1000",
			"pg_stat_statements.track_planning=on")
	}
	c, err := pgcluster.Start(ctx, pgcluster.Options{Dir: filepath.Join(b.tmp, "pg"), Durable: true, Log: os.Stderr, Settings: preload})
	if err != nil {
		return err
	}
	b.cluster = c
	b.cpu = &cpuMeter{postmasterPID: postmasterPID(filepath.Join(b.tmp, "pg", "data"))}
	conn, err := pgx.Connect(ctx, c.URL("postgres"))
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close(context.WithoutCancel(ctx)) }()
	var version string
	if err := conn.QueryRow(ctx, "SELECT version()").Scan(&version); err != nil {
		return err
	}
	var settings []string
	for _, name := range []string{"fsync", "synchronous_commit", "full_page_writes", "wal_sync_method", "max_connections", "shared_buffers", "max_wal_size", "shared_preload_libraries"} {
		var v string
		if err := conn.QueryRow(ctx, "SELECT current_setting($1)", name).Scan(&v); err != nil {
			return err
		}
		settings = append(settings, name+"="+v)
	}
	if !strings.Contains(strings.Join(settings, " "), "fsync=on") {
		return fmt.Errorf("cluster is not durable: %s", strings.Join(settings, " "))
	}
	b.rep.Machine.PostgreSQL = version
	b.rep.Machine.PGSettings = strings.Join(settings, " ")
	b.logf("%s", version)
	b.logf("%s", b.rep.Machine.PGSettings)
	for _, db := range []string{"baseline", "baseline_nonotify", "service", "service_paused", "service_empty", "service_history", outboxDB} {
		if _, err := conn.Exec(ctx, "CREATE DATABASE "+db); err != nil {
			return fmt.Errorf("creating database %s: %w", db, err)
		}
	}
	if err := storage.Migrate(ctx, c.URL("baseline"), storage.LockWait{}); err != nil {
		return err
	}
	if err := storage.Migrate(ctx, c.URL("baseline_nonotify"), storage.LockWait{}); err != nil {
		return err
	}
	nn, err := pgx.Connect(ctx, c.URL("baseline_nonotify"))
	if err != nil {
		return err
	}
	defer func() { _ = nn.Close(context.WithoutCancel(ctx)) }()
	var triggers []string
	if err := nn.QueryRow(ctx, `SELECT coalesce(array_agg(tgname::text), '{}') FROM pg_trigger
		WHERE tgrelid = 'inbox_events'::regclass AND NOT tgisinternal`).Scan(&triggers); err != nil {
		return err
	}
	if len(triggers) == 0 {
		if b.o.noNotify {
			b.logf("inbox_events has no trigger: the baseline variant without it is skipped")
		}
		b.o.noNotify = false
		return nil
	}
	b.logf("inbox_events triggers: %s", strings.Join(triggers, ", "))
	// Every user trigger (the NOTIFY one), not the constraint triggers.
	_, err = nn.Exec(ctx, "ALTER TABLE inbox_events DISABLE TRIGGER USER")
	return err
}

// sampleWaits starts sampling pg_stat_activity; the returned function stops
// it and returns the top activities.
func (b *bench) sampleWaits(ctx context.Context) func() []loadgen.WaitShare {
	s, err := loadgen.StartWaitSampler(ctx, b.cluster.URL("postgres"), 50*time.Millisecond)
	if err != nil {
		b.warn("sampling pg_stat_activity: %v", err)
		return func() []loadgen.WaitShare { return nil }
	}
	return func() []loadgen.WaitShare { return s.Stop(6) }
}

func (b *bench) logWaits(what string, ws []loadgen.WaitShare) {
	for _, w := range ws {
		b.logf("  pg %-28s %s", what, w)
	}
}
