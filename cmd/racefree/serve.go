package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/racefree/racefree"
	"github.com/racefree/racefree/dsn"
	"github.com/racefree/racefree/server"
	"github.com/spf13/cobra"
)

func serveCmd() *cobra.Command {
	var (
		db, addr, token string
		migrate         bool
		grace           time.Duration
	)
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Serve the HTTP API (binds 127.0.0.1:8080 by default)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return serve(cmd.Context(), db, addr, token, migrate, grace)
		},
	}
	f := cmd.Flags()
	f.StringVar(&db, "db", envOr("RACEFREE_DB", dsn.Default), "database: sqlite:PATH or postgres://… (env RACEFREE_DB)")
	f.StringVar(&addr, "addr", envOr("RACEFREE_ADDR", "127.0.0.1:8080"), "listen address (env RACEFREE_ADDR)")
	f.StringVar(&token, "token", envOr("RACEFREE_TOKEN", ""), "bearer token required on /v1/ when set (env RACEFREE_TOKEN)")
	f.BoolVar(&migrate, "migrate", true, "apply pending schema migrations at start")
	f.DurationVar(&grace, "shutdown-timeout", 30*time.Second, "how long in-flight requests may finish after SIGINT or SIGTERM")
	return cmd
}

func serve(ctx context.Context, dsnStr, addr, token string, migrate bool, grace time.Duration) error {
	if ctx == nil {
		ctx = context.Background()
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()

	if _, _, err := dsn.Parse(dsnStr); err != nil {
		return err
	}
	// Listen before opening the database, so that a port in use fails
	// before anything is written.
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	defer ln.Close()

	policy := racefree.SchemaRequireCurrent
	if migrate {
		policy = racefree.SchemaMigrate
	}
	openCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	db, err := dsn.Open(openCtx, dsnStr, &racefree.Config{Schema: policy})
	cancel()
	if err != nil {
		return err
	}
	defer db.Close()

	srv := &http.Server{
		Handler:           server.New(db, server.Options{Token: token, Logger: log}).Handler(),
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	log.Info("racefree serving", "addr", ln.Addr().String(), "engine", db.Engine(), "auth", token != "")

	select {
	case err := <-errc:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	log.Info("shutting down: finishing in-flight requests", "timeout", grace)
	shutdownCtx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	if err := <-errc; !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serve: %w", err)
	}
	log.Info("stopped")
	return nil
}
